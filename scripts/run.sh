#!/usr/bin/env bash
# One command on a fresh machine: installs the dependencies, builds, and runs the main job, the KDA
# drift table of the kda-smoke suite for every CPU candidate (JSON in results/kda-smoke.json).
# Arguments replace the default job: scripts/run.sh verify --suite kda-regimes --candidate kda_cpu_chunk_f32
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" >/dev/null
build=${DRIFTGATE_BUILD_DIR:-$root/build}
mkdir -p "$root/results"
if [ $# -eq 0 ]; then
  set -- verify --suite kda-smoke --json "$root/results/kda-smoke.json"
fi
exec "$build/driftgate" "$@"
