#!/usr/bin/env bash
# Builds driftgate's libFuzzer targets (tests/fuzz: the .safetensors reader, the case-string parser,
# the policy reader, and the readers behind verify --resume and gate --resume) with clang, AddressSanitizer
# and UndefinedBehaviorSanitizer in the sanitized build directory (scripts/sanitized-build.sh, shared
# with scripts/sanitize.sh), and runs each for a fixed budget.
# Fails on any crash, leak, sanitizer report or timeout; prints the executions of each target.
#
#   scripts/fuzz.sh                      every target, DRIFTGATE_FUZZ_SECONDS (default 60) each
#   scripts/fuzz.sh fuzz_case 600        one target, 600 seconds
#
# Seeds: tests/fuzz/corpus/<target>/ (read only). New inputs libFuzzer finds go to
# $build/corpus/<target>/ and crash reproducers to $build/artifacts/; add a reproducer to the seed
# corpus (as regression_<what>) once the bug is fixed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
all=(fuzz_safetensors fuzz_case fuzz_policy fuzz_verify_json fuzz_verdict_json)
seconds=${DRIFTGATE_FUZZ_SECONDS:-60}
targets=("${all[@]}")
if [ $# -ge 1 ]; then targets=("$1"); fi
if [ $# -ge 2 ]; then seconds=$2; fi

build=$(bash "$root/scripts/sanitized-build.sh" "${targets[@]}" | tail -1)

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
total=0
failed=()
mkdir -p "$build/artifacts"
for t in "${targets[@]}"; do
  work="$build/corpus/$t"
  mkdir -p "$work"
  log="$build/$t.log"
  set +e
  "$build/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" "$work" "$root/tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  execs=${execs:-0}
  total=$((total + execs))
  if [ $rc -ne 0 ]; then
    failed+=("$t")
    echo "fuzz: $t FAILED (exit $rc) after $execs executions; log $log"
    grep -E "ERROR|runtime error|SUMMARY|Test unit written" "$log" | head -20 || true
  else
    echo "fuzz: $t ok, $execs executions in ${seconds}s, 0 crashes"
  fi
done
echo "fuzz: $total executions in total"
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: crashes in ${failed[*]}"
  exit 1
fi
