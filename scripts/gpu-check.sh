#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA device (an H200 or H100), build driftgate with its CUDA
# candidates, run the CUDA unit tests, `driftgate selftest`, `verify` of the CUDA candidates on
# kda-smoke, kda-regimes and layer-smoke (beside the CPU candidates of the same algorithms), the
# gate of the decode kernel against the CPU decode, and the bench of the decode kernels at B = 1, 8,
# 64, 256 sequences (H=32, K=V=128). Everything lands in one folder (default results/gpu-check),
# with a summary.txt of what ran and how it ended. About 5 minutes on an H200.
#
#   scripts/gpu-check.sh [--out DIR] [--prebuilt DIR]
#
# --prebuilt DIR uses binaries made by scripts/gpu-bundle.sh (DIR/bin, DIR/lib) instead of building:
# for a GPU machine that has CUDA but not driftgate's Debian dependencies.
# A step that fails is recorded in summary.txt and the check goes on; the exit code is the number
# of failed steps (0: all ran and passed).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/results/gpu-check"
prebuilt=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --prebuilt) prebuilt="$2"; shift 2 ;;
    *) echo "gpu-check: unknown argument '$1' (use --out DIR, --prebuilt DIR)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
failed=0

# step NAME LOGFILE CMD...: runs CMD with its output in LOGFILE, records status and seconds.
step() {
  local name="$1" log="$2"; shift 2
  local t0=$SECONDS rc
  echo "== $name: $*" | tee -a "$summary"
  "$@" >"$log" 2>&1
  rc=$?
  echo "   exit $rc in $((SECONDS - t0)) s ($(basename "$log"))" | tee -a "$summary"
  [ $rc -eq 0 ] || failed=$((failed + 1))
  return 0
}

{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1; } \
  >"$out/device.txt"
cat "$out/device.txt" >>"$summary"

if [ -n "$prebuilt" ]; then
  bin="$prebuilt/bin"
  tests="$prebuilt/bin"
  export LD_LIBRARY_PATH="$prebuilt/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  build=${DRIFTGATE_BUILD_DIR:-$root/build-gpu}
  step setup "$out/setup.log" bash "$root/scripts/setup.sh"
  step build "$out/build.log" env DRIFTGATE_BUILD_DIR="$build" bash "$root/scripts/build.sh" -DDRIFTGATE_CUDA=ON
  bin="$build"
  tests="$build/tests"
fi
dg="$bin/driftgate"
if [ ! -x "$dg" ]; then
  echo "gpu-check: no driftgate binary at $dg" | tee -a "$summary" >&2
  exit 2
fi

step cuda-tests "$out/cuda-tests.log" bash -c "'$tests/cuda_device_test' && '$tests/cuda_kda_test'"
step selftest "$out/selftest.log" "$dg" selftest
step verify-smoke "$out/verify-smoke.log" "$dg" verify --suite kda-smoke --certify \
  --candidate kda_decode_cuda_f32state,kda_cuda_chunk_bf16,kda_decode_cpu_f32,kda_cpu_chunk_bf16 \
  --json "$out/verify-smoke.json"
step verify-regimes "$out/verify-regimes.log" "$dg" verify --suite kda-regimes \
  --candidate kda_cuda_chunk_bf16,kda_cpu_chunk_bf16 --json "$out/verify-regimes.json"
step verify-layer "$out/verify-layer.log" "$dg" verify --suite layer-smoke --certify \
  --candidate kda_decode_cuda_f32state_fused,kda_decode_fused_cpu_f32 --json "$out/verify-layer.json"
gate_cases=()
for b in "" "B=8," "B=64," "B=256,"; do
  gate_cases+=(--case "kda_decode(T=8,${b}H=32,K=128,V=128,layout=vfirst,regime=kimi_linear,dtype=bf16,seed=0)")
done
step gate-decode "$out/gate-decode.log" "$dg" gate --base kda_decode_cpu_f32 --patch kda_decode_cuda_f32state \
  "${gate_cases[@]}" --ref-tier f64 --out "$out/gate-decode"
step bench-decode "$out/bench-decode.log" "$dg" bench --suite kda-decode-gpu --max-time 4 \
  --candidate kda_decode_cuda_f32state,kda_decode_cuda_f32state_fused --json "$out/bench-decode.json"

echo "failed steps: $failed" | tee -a "$summary"
exit "$failed"
