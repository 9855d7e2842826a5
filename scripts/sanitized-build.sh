#!/usr/bin/env bash
# Builds the given targets in driftgate's sanitized build directory: clang, -DDRIFTGATE_FUZZ=ON
# (every object instrumented for libFuzzer's coverage, AddressSanitizer and
# UndefinedBehaviorSanitizer; see CMakeLists.txt), -O2 with line tables only: the fuzz targets
# (scripts/fuzz.sh) and the sanitized test programs (scripts/sanitize.sh) share its objects, so CI
# compiles the sources once for both. Prints the build directory on its last line.
#
#   scripts/sanitized-build.sh TARGET...
#
# DRIFTGATE_SANITIZE_BUILD_DIR: the directory (default build-sanitize); DRIFTGATE_JOBS: parallel jobs.
# One configuration, measured on the reference file reference/kda.cpp: 22 s to compile against
# 70 s for GCC's -O2 -g with the same sanitizers (19 s at -O1, but -O1 leaves the machine
# measurement's FMA loops scalar, and its sanity test fails).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DRIFTGATE_SANITIZE_BUILD_DIR:-$root/build-sanitize}
if [ $# -eq 0 ]; then echo "usage: scripts/sanitized-build.sh TARGET..." >&2; exit 2; fi
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache); fi
cmake -S "$root" -B "$build" -DDRIFTGATE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only" \
  "${launcher[@]}" >/dev/null
cmake --build "$build" -j "${DRIFTGATE_JOBS:-$(nproc)}" --target "$@" >&2
echo "$build"
