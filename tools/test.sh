#!/usr/bin/env bash
# Lint, type-check and run the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
lint="wheeld simulators drivers tests benchmarks"
echo "== ruff"; ruff check $lint && ruff format --check $lint
echo "== mypy --strict"; mypy wheeld simulators/wheeld_simulators tests \
    drivers/cammegh/wheeld_cammegh drivers/cammegh/tests
echo "== import contracts"; lint-imports
# Four workers on two cores, work stolen at the end: most tests wait on a broker,
# a pty or a daemon, and every test has its own ports, directories and topics.
echo "== pytest"; exec pytest -q -n 4 --dist worksteal --durations=15 "$@"
