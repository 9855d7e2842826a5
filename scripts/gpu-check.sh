#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA device (an H200 or H100), build driftgate with its CUDA
# candidates, run the CUDA unit tests, `driftgate selftest`, `verify` of the CUDA candidates on
# kda-smoke, kda-regimes and layer-smoke (beside the CPU candidates of the same algorithms), of the
# layer ops' CUDA candidates (rmsnorm, add_rmsnorm, swiglu, the cuBLASLt gemm, rope, the MoE router,
# the block-scaled FP8 cuBLASLt gemm, the split-KV paged decode attention, the packed MLA decode) on
# their smoke suites, the gate of the decode kernel against the CPU decode, the bench of the decode
# kernels at B = 1, 8, 64, 256 sequences (H=32, K=V=128), the bench of the split-KV decode attention kernel on
# attention-decode-gpu (GLM-4.5's 12 q heads over 1 kv head of 128 per TP-8 rank, page 16: B = 1, 8,
# 64 at 32K, 8K, 4K context, and FP8 pages at B = 8), the bench of the MLA decode kernel on mla-decode-gpu
# (DeepSeek-V3's 16 q heads per TP-8 rank over the 576 latent, page 64: dense at B = 1, 8, 32, FP8
# pages, sparse top-2048), and the decode kernel's bandwidth target: at least 70% of the
# device's peak at B >= 64 (scripts/hbm-target.awk). First, the sandbox diagnosis (below); then the
# GPU steps, and selftest last, so the budget reaches the GPU. Everything lands in one folder (default results/gpu-check), with a
# summary.txt of what ran and how it ended.
#
#   scripts/gpu-check.sh [--out DIR] [--prebuilt DIR] [--budget SECONDS] [--steps LIST]
#
# --steps: a comma list of the steps to run (cuda-tests, bench-decode, bench-attention, bench-mla, verify-smoke,
# verify-layer, verify-layer-ops, verify-regimes, gate-decode, selftest; default all); the sandbox diagnosis always
# runs.
# --prebuilt DIR uses binaries made by scripts/gpu-bundle.sh (DIR/bin, DIR/lib) instead of building:
# for a GPU machine that has CUDA but not driftgate's Debian dependencies.
# --budget: the seconds the steps after the build may take, all together (default 480: 8 minutes);
# each step runs under `timeout` with what is left, and a step left no time fails as "out of time".
#
# A run that did not use the GPU cannot pass: DRIFTGATE_REQUIRE_GPU turns the GPU tests' skip into a
# failure, and a verify or bench step with a NOT_SUPPORTED CUDA row fails. A step that fails is
# recorded in summary.txt and the check goes on; the exit code is the number of failed steps (0: all
# ran and passed).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/results/gpu-check"
prebuilt=""
budget=480
steps=",all,"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --prebuilt) prebuilt="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --steps) steps=",$2,"; shift 2 ;;
    *) echo "gpu-check: unknown argument '$1' (use --out DIR, --prebuilt DIR, --budget SECONDS, --steps LIST)" >&2; exit 2 ;;
  esac
done
case "$budget" in
  ''|*[!0-9]*) echo "gpu-check: --budget must be a whole number of seconds, got '$budget'" >&2; exit 2 ;;
esac
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
failed=0
deadline=""   # set after the build
export DRIFTGATE_REQUIRE_GPU=1

# step NAME LOGFILE CMD...: runs CMD with its output in LOGFILE (under `timeout` with the time left
# once the deadline is set), records its status and seconds.
step() {
  local name="$1" log="$2"; shift 2
  local t0=$SECONDS rc left
  case "$steps" in
    *,all,*|*",$name,"*) ;;
    *) echo "== $name: left out (--steps)" | tee -a "$summary"; return 0 ;;
  esac
  echo "== $name: $*" | tee -a "$summary"
  if [ -n "$deadline" ]; then
    left=$((deadline - SECONDS))
    if [ "$left" -lt 5 ]; then
      echo "   out of time: not run (budget ${budget} s)" | tee -a "$summary"
      failed=$((failed + 1))
      return 0
    fi
    timeout --kill-after=10 "$left" "$@" >"$log" 2>&1
  else
    "$@" >"$log" 2>&1
  fi
  rc=$?
  # (a killed step's workers end with it: harness/isolation/worker.h exit_with_parent)
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "   timed out at the budget's end" | tee -a "$summary"; fi
  echo "   exit $rc in $((SECONDS - t0)) s ($(basename "$log"))" | tee -a "$summary"
  [ $rc -eq 0 ] || failed=$((failed + 1))
  return 0
}

# ran_on_device NAME FILE: a failed step when FILE shows a CUDA candidate that did not run.
ran_on_device() {
  if grep -qE '"NOT_SUPPORTED"|not timed: NOT_SUPPORTED' "$2" 2>/dev/null; then
    echo "   $1: a CUDA row is NOT_SUPPORTED ($(basename "$2")): the device was not used" | tee -a "$summary"
    failed=$((failed + 1))
  fi
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
deadline=$((SECONDS + budget))

# The sandbox with a device: one tiny CUDA verify under each set of left-out mechanisms (the device
# profile itself first, then the whole sandbox and single mechanisms, with the device profile off),
# one line each in sandbox-matrix.txt, and the failing whole-sandbox run under strace (failed calls
# only) where the bundle carries it. When the device profile does not start CUDA, the first set
# that does is used for the rest of the run (said in summary.txt), so the tables still come.
probe_case="kda_decode(T=2,B=1,H=1,K=64,V=64,layout=vfirst,regime=kimi_linear,seed=0)"
probe() {   # probe WORDS DEVICE_WORDS -> "WORDS | DEVICE_WORDS | disposition | reason | confinement"
  local j="$out/probe.json"
  rm -f "$j"
  local dev=(-u DRIFTGATE_DEVICE_SANDBOX_DISABLE)   # empty: the device profile as built
  [ -z "$2" ] || dev=(DRIFTGATE_DEVICE_SANDBOX_DISABLE="$2")
  env "${dev[@]}" DRIFTGATE_SANDBOX_DISABLE="$1" timeout 60 "$dg" verify \
    --case "$probe_case" --candidate kda_decode_cuda_f32state --json "$j" >/dev/null 2>&1
  local d r c
  d=$(grep -o '"disposition": *"[A-Z_]*"' "$j" 2>/dev/null | head -1 | sed 's/.*: *"//; s/"//')
  r=$(grep -o '"reason": *"[^"]*"' "$j" 2>/dev/null | head -1 | sed 's/.*: *"//; s/"$//' | cut -c1-160)
  c=$(grep -o '"confinement": *"[^"]*"' "$j" 2>/dev/null | head -1 | sed 's/.*: *"//; s/"$//')
  echo "${1:-(none)} | ${2:-(device profile)} | ${d:-no row} | ${r} | ${c}"
}
echo "== sandbox-matrix: a CUDA verify under each sandbox setting (sandbox-matrix.txt)" | tee -a "$summary"
{
  echo "left out for every worker | left out for device workers | disposition | reason | confinement"
  probe "" "${DRIFTGATE_DEVICE_SANDBOX_DISABLE-}"
  for w in none pidns,landlock-fs pidns netns landlock-fs landlock-net landlock-scope landlock-net,landlock-scope \
           netns,landlock-net netns,landlock-scope netns,landlock-net,landlock-scope netns,landlock \
           pidns,landlock namespaces namespaces,landlock-fs namespaces,landlock; do
    probe "$w" none
  done
} >"$out/sandbox-matrix.txt" 2>&1
cat "$out/sandbox-matrix.txt" | tee -a "$summary"
if [ -x "$bin/strace" ]; then
  # The device profile, then each mechanism alone (the other off): the calls that fail.
  for w in device-profile pidns landlock; do
    if [ "$w" = device-profile ]; then
      cmd=(env -u DRIFTGATE_SANDBOX_DISABLE)
    else
      cmd=(env DRIFTGATE_SANDBOX_DISABLE="$w" DRIFTGATE_DEVICE_SANDBOX_DISABLE=none)
    fi
    "${cmd[@]}" timeout 60 "$bin/strace" -f -Z -qq -o "$out/strace-without-$w.txt" \
      "$dg" verify --case "$probe_case" --candidate kda_decode_cuda_f32state >/dev/null 2>&1
    grep -vE 'ENOENT|EAGAIN|ECHILD|EINTR|ERESTART|ENOTTY|SIGCHLD|rt_sigaction\(SIG(KILL|STOP)' "$out/strace-without-$w.txt" \
      | tail -80 >"$out/strace-failed-without-$w.txt"
    echo "   failed calls of a CUDA worker ($w; ENOENT and the like left out): strace-failed-without-$w.txt" \
      | tee -a "$summary"
    cat "$out/strace-failed-without-$w.txt" >>"$summary"
  done
fi
if ! sed -n 2p "$out/sandbox-matrix.txt" | grep -q '| PASSED |'; then
  pick=$(tail -n +3 "$out/sandbox-matrix.txt" | grep '| PASSED |' | head -1 | cut -d'|' -f1 | tr -d ' ')
  echo "   the device profile does not start CUDA; the rest of this run leaves out '${pick:-namespaces,landlock}' for device workers" | tee -a "$summary"
  failed=$((failed + 1))
  export DRIFTGATE_DEVICE_SANDBOX_DISABLE="${pick:-namespaces,landlock}"
fi

# The GPU steps first, so the budget reaches them; selftest (CPU canaries) last.
step cuda-tests "$out/cuda-tests.log" bash -c \
  "'$tests/cuda_device_test' && '$tests/cuda_kda_test' && '$tests/cuda_layer_ops_test' && '$tests/cuda_attention_decode_test' \
   && '$tests/cuda_mla_decode_test'"
step bench-decode "$out/bench-decode.log" "$dg" bench --suite kda-decode-gpu --max-time 4 \
  --candidate kda_decode_cuda_f32state,kda_decode_cuda_f32state_fused --json "$out/bench-decode.json"
if [ -f "$out/bench-decode.log" ]; then
  ran_on_device bench-decode "$out/bench-decode.log"
  echo "== hbm-target: the decode kernel at >= 70% of peak bandwidth for B >= 64 (V-first)" | tee -a "$summary"
  awk -f "$root/scripts/hbm-target.awk" "$out/bench-decode.log" >"$out/hbm-target.txt" 2>&1 || failed=$((failed + 1))
  tee -a "$summary" <"$out/hbm-target.txt"
fi
step bench-attention "$out/bench-attention.log" "$dg" bench --suite attention-decode-gpu --max-time 4 \
  --candidate attention_decode_cuda_splitkv_f32 --json "$out/bench-attention.json"
ran_on_device bench-attention "$out/bench-attention.log"
step bench-mla "$out/bench-mla.log" "$dg" bench --suite mla-decode-gpu --max-time 4 \
  --candidate mla_decode_cuda_packed_f32 --json "$out/bench-mla.json"
ran_on_device bench-mla "$out/bench-mla.log"
step verify-smoke "$out/verify-smoke.log" "$dg" verify --suite kda-smoke --certify \
  --candidate kda_decode_cuda_f32state,kda_cuda_chunk_bf16,kda_decode_cpu_f32,kda_cpu_chunk_bf16 \
  --json "$out/verify-smoke.json"
ran_on_device verify-smoke "$out/verify-smoke.json"
step verify-layer "$out/verify-layer.log" "$dg" verify --suite layer-smoke --certify \
  --candidate kda_decode_cuda_f32state_fused,kda_decode_fused_cpu_f32 --json "$out/verify-layer.json"
ran_on_device verify-layer "$out/verify-layer.json"
# The layer ops' CUDA candidates beside the CPU candidates of the same arithmetic, one verify per
# suite (verify takes one suite), every suite run even when one fails; every JSON is checked for a
# CUDA row that did not run.
layer_ops=("rmsnorm-smoke rmsnorm_cuda_bf16,rmsnorm_cpu_blocked_bf16"
           "add-rmsnorm-smoke add_rmsnorm_cuda_bf16,add_rmsnorm_cpu_blocked_bf16"
           "swiglu-smoke swiglu_cuda_bf16,swiglu_cpu_fused_bf16"
           "gemm-smoke gemm_cuda_cublaslt_bf16,gemm_cpu_blocked_bf16"
           "rope-smoke rope_cuda_bf16,rope_cpu_cache_bf16"
           "moe-router-smoke moe_router_cuda_f32,moe_router_cpu_naive_f32"
           "gemm-fp8-block-smoke gemm_fp8_block_cuda_cublaslt,gemm_fp8_block_cpu_deepgemm_bf16"
           "attention-decode-smoke attention_decode_cuda_splitkv_f32,attention_decode_cpu_splitkv_f32"
           "mla-decode-smoke mla_decode_cuda_packed_f32,mla_decode_cpu_packed_f32")
layer_ops_cmd="rc=0; "
for pair in "${layer_ops[@]}"; do
  read -r suite cands <<<"$pair"
  layer_ops_cmd+="'$dg' verify --suite $suite --certify --candidate $cands --json '$out/verify-$suite.json' || rc=1; "
done
step verify-layer-ops "$out/verify-layer-ops.log" bash -c "${layer_ops_cmd}exit \$rc"
for pair in "${layer_ops[@]}"; do
  read -r suite _ <<<"$pair"
  ran_on_device verify-layer-ops "$out/verify-$suite.json"
done
step verify-regimes "$out/verify-regimes.log" "$dg" verify --suite kda-regimes \
  --candidate kda_cuda_chunk_bf16,kda_cpu_chunk_bf16 --json "$out/verify-regimes.json"
ran_on_device verify-regimes "$out/verify-regimes.json"
gate_cases=()
# (B = 256 is left out: the CPU base alone takes over 100 s there.)
for b in "" "B=8," "B=64,"; do
  gate_cases+=(--case "kda_decode(T=8,${b}H=32,K=128,V=128,layout=vfirst,regime=kimi_linear,dtype=bf16,seed=0)")
done
step gate-decode "$out/gate-decode.log" "$dg" gate --base kda_decode_cpu_f32 --patch kda_decode_cuda_f32state \
  "${gate_cases[@]}" --ref-tier f64 --out "$out/gate-decode"
step selftest "$out/selftest.log" "$dg" selftest

echo "failed steps: $failed" | tee -a "$summary"
exit "$failed"
