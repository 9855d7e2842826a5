#!/bin/sh
# ctest's runner for tests/python: run.sh VENV_PYTHON DRIFTGATE_EXE MODULE...
# Runs the test modules with the checkout's venv (scripts/setup.sh makes it); exits 77, which ctest
# reads as skipped, with the reason when the venv or its driftgate package is missing.
py=$1
exe=$2
shift 2
if [ ! -x "$py" ]; then
  echo "skip: no virtual environment at $py (scripts/setup.sh creates it with the driftgate Python package)"
  exit 77
fi
if ! "$py" -c 'import driftgate' >/dev/null 2>&1; then
  echo "skip: $py cannot import driftgate (scripts/setup.sh installs python/ into the venv)"
  exit 77
fi
cd "$(dirname "$0")" || exit 1
DRIFTGATE_EXE=$exe exec "$py" -m unittest -v "$@"
