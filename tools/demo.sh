#!/usr/bin/env bash
# The demo: decide the games of a bundled WRP/1 capture and show them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/setup.sh
exec .venv/bin/wheeld replay tests/captures/wrp/fault-respin-too-early.cap
