#!/usr/bin/env bash
# Lint, type-check and run the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check wheeld tests benchmarks && ruff format --check wheeld tests benchmarks
echo "== mypy --strict"; mypy wheeld
echo "== pytest"; exec pytest -q "$@"
