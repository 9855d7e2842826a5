// Candidates that are honest in their check runs and fail only while timed: they crash or hang once
// they have been called more often than a worker's two check runs, as happens in the timing worker
// (harness/timing/timing_worker.h), which calls a candidate many times in a process of its own. Each must
// become an ERRORED check of its case ("timing"), the other cases still judged and the verdict files
// written (gate), or an ERRORED row (bench): never an abort of driftgate. And one that supports no
// case at all: a gate that judged nothing is CANNOT_JUDGE, never MERGE.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "candidates/cheats/kda_cheat.h"

namespace dg::cheats {
namespace {

// More calls in this process than a check worker makes (worker --runs 2): being timed.
bool being_timed() {
  static std::atomic<int> calls{0};
  return ++calls > 2;
}

}  // namespace

DG_REGISTER_CANDIDATE(kda_cheat_segfault_timed,
                      cheat_info("kda_cheat_segfault_timed", "honest in its check runs; SIGSEGV once timed"),
                      [](const Case& c, const TensorMap& in, TensorMap& out) {
                        if (being_timed()) {
                          std::fputs("kda_cheat_segfault_timed: writing through a null pointer\n", stderr);
                          volatile int* volatile p = nullptr;
                          *p = 42;
                        }
                        honest().run(c, in, out);
                      });
DG_REGISTER_CANDIDATE(kda_cheat_hang_timed,
                      cheat_info("kda_cheat_hang_timed", "honest in its check runs; sleeps forever once timed"),
                      [](const Case& c, const TensorMap& in, TensorMap& out) {
                        if (being_timed())
                          for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
                        honest().run(c, in, out);
                      });

// Answers "not supported" for every case: nothing is judged, so the gate cannot MERGE it (CANNOT_JUDGE).
DG_REGISTER_CANDIDATE(kda_cheat_unsupported,
                      cheat_info("kda_cheat_unsupported", "answers NOT_SUPPORTED for every case (nothing to judge)"),
                      [](const Case&, const TensorMap&, TensorMap&) {
                        throw NotSupported("kda_cheat_unsupported: no case is supported");
                      });

}  // namespace dg::cheats
