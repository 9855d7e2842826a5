// Candidates that crash, hang, exhaust memory or throw. Each must become an ERRORED row with its
// cause (harness/isolation/worker.h), never take the harness down.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "candidates/cheats/kda_cheat.h"

namespace dg::cheats {
namespace {

// Writes through a null pointer the compiler cannot see is null, as a volatile store it may not
// drop: a real SIGSEGV, not a trap instruction.
void null_write() {
  std::fputs("kda_cheat_segfault: writing through a null pointer\n", stderr);
  volatile int* volatile p = nullptr;
  *p = 42;
}

// Touches every page of ever more 64 MiB blocks until an allocation fails; the std::bad_alloc
// escapes (worker status out_of_memory). Under no limit it would take the machine's memory.
void exhaust_memory() {
  std::vector<std::unique_ptr<char[]>> blocks;
  constexpr size_t kBlock = size_t{64} << 20;
  for (;;) {
    blocks.emplace_back(new char[kBlock]);
    std::memset(blocks.back().get(), static_cast<int>(blocks.size()), kBlock);
    volatile char sink = blocks.back()[kBlock - 1];
    (void)sink;
  }
}

}  // namespace

DG_REGISTER_CANDIDATE(kda_cheat_segfault, cheat_info("kda_cheat_segfault", "writes through a null pointer (SIGSEGV)"),
                      [](const Case&, const TensorMap&, TensorMap&) { null_write(); });
DG_REGISTER_CANDIDATE(kda_cheat_abort, cheat_info("kda_cheat_abort", "prints a line, then abort() (SIGABRT)"),
                      [](const Case&, const TensorMap&, TensorMap&) {
                        std::fputs("kda_cheat_abort: giving up\n", stderr);
                        std::abort();
                      });
DG_REGISTER_CANDIDATE(kda_cheat_hang, cheat_info("kda_cheat_hang", "sleeps forever (wall limit)"),
                      [](const Case&, const TensorMap&, TensorMap&) {
                        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
                      });
DG_REGISTER_CANDIDATE(kda_cheat_oom, cheat_info("kda_cheat_oom", "allocates and touches memory until an allocation fails"),
                      [](const Case&, const TensorMap&, TensorMap&) { exhaust_memory(); });
DG_REGISTER_CANDIDATE(kda_cheat_throw, cheat_info("kda_cheat_throw", "throws std::runtime_error"),
                      [](const Case&, const TensorMap&, TensorMap&) {
                        throw std::runtime_error("kda_cheat_throw: this kernel does not support the case");
                      });

}  // namespace dg::cheats
