#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer build of driftgate and its tests (clang,
# -fsanitize=address,undefined -fno-sanitize-recover=undefined, in the sanitized build directory
# that scripts/fuzz.sh shares: scripts/sanitized-build.sh), then the tests. Any sanitizer report
# aborts the test program that triggered it, and so fails this script.
#
# The subset: every test of the parsers and the input and output checks (safetensors, case, policy,
# machine, tensor, dtype, metrics, stats, guard, gate) and the command-line tests of bad input,
# which run the sanitized driftgate on every bad-input path. The numeric and end-to-end suites
# (kda_test, certify_test, the candidate and CUDA-emulator tests, cli_test, worker_test) run
# their reference loops ~10x slower under the sanitizers and would take CI past its limit on two
# cores; they run unsanitized in scripts/test.sh. DRIFTGATE_SANITIZE_TESTS="a_test b_test" runs
# other test programs instead (each must be a target of the build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tests=(dtype_test tensor_test safetensors_test case_test policy_test machine_test metrics_test stats_test
       guard_test gate_test cli_bad_input_test)
if [ -n "${DRIFTGATE_SANITIZE_TESTS:-}" ]; then read -r -a tests <<<"$DRIFTGATE_SANITIZE_TESTS"; fi
build=$(bash "$root/scripts/sanitized-build.sh" driftgate "${tests[@]}" | tail -1)

# Leak checking is off: workers end with _exit by design, and a leak is not a memory error.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$build/tests"   # where the test programs are
failed=()
for t in "${tests[@]}"; do
  start=$(date +%s)
  if ./"$t" --gtest_brief=1 >"$t.sanitize.log" 2>&1; then
    echo "sanitize: $t ok ($(($(date +%s) - start)) s)"
  else
    failed+=("$t")
    echo "sanitize: $t FAILED ($(($(date +%s) - start)) s); the end of $build/$t.sanitize.log:"
    tail -40 "$t.sanitize.log"
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "sanitize: failures in ${failed[*]}"
  exit 1
fi
echo "sanitize: ${#tests[@]} test programs clean under AddressSanitizer and UndefinedBehaviorSanitizer"
