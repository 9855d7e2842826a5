// Cheats aimed at what the timing process can measure about itself (harness/timing_worker.h): both
// compute the honest result; both would look faster to a timer inside their own process.
//   kda_cheat_slow_clock     patches the C library's clock_gettime in its own process so that
//                            CLOCK_MONOTONIC (std::chrono::steady_clock) runs at half speed during
//                            its calls: a timer in that process sees each of them take half as long,
//                            and other candidates' calls as they are (rule clock)
//   kda_cheat_hidden_thread  ignores the thread budget: widens its own CPU affinity to every core and
//                            splits the heads over two threads (rule cpu_budget)
#include <dlfcn.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "candidates/cheats/kda_cheat.h"
#include "harness/threads.h"

namespace dg {
namespace {

using cheats::cheat_info;
using cheats::honest;

// --- a clock at half speed ----------------------------------------------------------------------
// The clock runs at half speed during the cheat's own calls: half of each call's duration is
// taken off CLOCK_MONOTONIC from its end on, so a timer in this process sees half the call.
std::atomic<int64_t> g_stolen_ns{0};

int64_t real_monotonic_ns() {
  timespec ts{};
  ::syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

extern "C" int dg_cheat_half_speed_clock_gettime(clockid_t id, timespec* ts) {
  const long rc = ::syscall(SYS_clock_gettime, id, ts);
  if (rc != 0 || id != CLOCK_MONOTONIC) return static_cast<int>(rc);
  const int64_t now = int64_t{ts->tv_sec} * 1000000000 + ts->tv_nsec - g_stolen_ns.load();
  ts->tv_sec = now / 1000000000;
  ts->tv_nsec = now % 1000000000;
  return 0;
}

// Overwrites the start of the C library's clock_gettime with a jump to the function above
// (x86-64: movabs rax, imm64; jmp rax). Throws where it cannot (other architectures, W^X).
void slow_down_clock() {
#if defined(__x86_64__)
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    auto* target = reinterpret_cast<unsigned char*>(::dlsym(RTLD_DEFAULT, "clock_gettime"));
    if (!target) {
      error = "no clock_gettime to patch";
      return;
    }
    const long page = ::sysconf(_SC_PAGESIZE);
    auto* start = reinterpret_cast<unsigned char*>(reinterpret_cast<uintptr_t>(target) & ~static_cast<uintptr_t>(page - 1));
    const size_t len = static_cast<size_t>(target + 16 - start);
    if (::mprotect(start, len, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
      error = std::string("mprotect: ") + std::strerror(errno);
      return;
    }
    unsigned char jump[12] = {0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xe0};
    const auto addr = reinterpret_cast<uint64_t>(&dg_cheat_half_speed_clock_gettime);
    std::memcpy(jump + 2, &addr, sizeof addr);
    std::memcpy(target, jump, sizeof jump);
    ::mprotect(start, len, PROT_READ | PROT_EXEC);
  });
  if (!error.empty()) throw std::runtime_error("kda_cheat_slow_clock: cannot patch the clock: " + error);
#else
  throw std::runtime_error("kda_cheat_slow_clock: the clock patch is written for x86-64 only");
#endif
}

void slow_clock(const Case& c, const TensorMap& in, TensorMap& out) {
  slow_down_clock();
  const int64_t t0 = real_monotonic_ns();
  honest().run(c, in, out);
  g_stolen_ns += (real_monotonic_ns() - t0) / 2;
}

// --- a hidden second thread ---------------------------------------------------------------------
void hidden_thread(const Case& c, const TensorMap& in, TensorMap& out) {
  cpu_set_t all;
  CPU_ZERO(&all);
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  for (long i = 0; i < n && i < CPU_SETSIZE; ++i) CPU_SET(static_cast<int>(i), &all);
  ::sched_setaffinity(0, sizeof all, &all);   // threads it starts inherit this
  const int budget = num_threads();
  set_num_threads(2);
  try {
    honest().run(c, in, out);
  } catch (...) {
    set_num_threads(budget);
    throw;
  }
  set_num_threads(budget);
}

}  // namespace

DG_REGISTER_CANDIDATE(kda_cheat_slow_clock,
                      cheat_info("kda_cheat_slow_clock", "patches clock_gettime in its process to run at half speed during its calls (rule clock)"),
                      slow_clock);
DG_REGISTER_CANDIDATE(kda_cheat_hidden_thread,
                      cheat_info("kda_cheat_hidden_thread", "widens its affinity and runs two threads whatever the budget (rule cpu_budget)"),
                      hidden_thread);

}  // namespace dg
