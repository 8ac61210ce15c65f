#!/usr/bin/env bash
# The demo: a simulated wheel, the daemon on it and a broker, with the games live.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/setup.sh
exec .venv/bin/wheeld demo "$@"
