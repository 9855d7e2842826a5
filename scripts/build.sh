#!/usr/bin/env bash
# Configures and builds driftgate (Release) into build/ (or $DRIFTGATE_BUILD_DIR).
# Extra arguments go to cmake's configure step, e.g. -DDRIFTGATE_CUDA=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DRIFTGATE_BUILD_DIR:-$root/build}
jobs=${DRIFTGATE_JOBS:-$(nproc)}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build" -j "$jobs"
