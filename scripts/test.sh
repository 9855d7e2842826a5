#!/usr/bin/env bash
# One command on a fresh machine: installs the dependencies, builds, and runs every test (ctest).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"
build=${DRIFTGATE_BUILD_DIR:-$root/build}
cd "$build"
ctest --output-on-failure -j "${DRIFTGATE_JOBS:-$(nproc)}" --timeout 900
