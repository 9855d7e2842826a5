#!/bin/sh
# ctest's runner for the Kubernetes manifests test: run.sh VENV_PYTHON DRIFTGATE_EXE. Exits 77, which
# ctest reads as skipped, naming the reason, when the checkout's venv or its kubernetes-validate is
# missing (scripts/setup.sh installs both).
py=$1
exe=$2
if [ ! -x "$py" ]; then
  echo "skip: no virtual environment at $py (scripts/setup.sh creates it)"
  exit 77
fi
if ! "$py" -c 'import kubernetes_validate, yaml' >/dev/null 2>&1; then
  echo "skip: $py cannot import kubernetes_validate (scripts/setup.sh installs kubernetes-validate into the venv)"
  exit 77
fi
cd "$(dirname "$0")" || exit 1
DRIFTGATE_EXE=$exe exec "$py" -m unittest -v test_manifests
