// Attacks on what a timing process can measure about itself, shared by the built-in timing canaries
// (kda_timing_trust_cheats.cpp) and the cheating test plugins (tests/attacks/timing_cheat_plugin.cpp).
// Header-only and free of driftgate's own types, so that a plugin built on the C ABI alone can use
// it. Each attack runs in the process of the candidate that uses it; driftgate's defence is to
// measure from outside that process (harness/timing_worker.h).
//
//   half_speed_clock   patches the C library's clock_gettime so that CLOCK_MONOTONIC loses `stolen`
//                      nanoseconds: a cheat adds half of each of its calls, and a timer in its
//                      process sees each call take half as long (rule clock)
//   burn_other_calls   a 1 kHz timer signal aimed at the calling thread burns 0.8 ms of every 1 ms
//                      while `in_own_call` is false: every other call made in that thread (the
//                      base's, were they timed in one process) takes 5x as long, on one core and
//                      with every clock honest
#pragma once

#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace dg::cheats {

inline int64_t real_monotonic_ns() {
  timespec ts{};
  ::syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

inline void spin_until_ns(int64_t end) {
  while (real_monotonic_ns() < end) {
  }
}

// --- a clock at half speed ----------------------------------------------------------------------
inline std::atomic<int64_t> stolen_ns{0};

inline int half_speed_clock_gettime(clockid_t id, timespec* ts) {
  const long rc = ::syscall(SYS_clock_gettime, id, ts);
  if (rc != 0 || id != CLOCK_MONOTONIC) return static_cast<int>(rc);
  const int64_t now = int64_t{ts->tv_sec} * 1000000000 + ts->tv_nsec - stolen_ns.load();
  ts->tv_sec = now / 1000000000;
  ts->tv_nsec = now % 1000000000;
  return 0;
}

// Overwrites the start of the C library's clock_gettime with a jump to the function above
// (x86-64: movabs rax, imm64; jmp rax), once. Returns nullptr, or why it cannot (other
// architectures, W^X).
inline const char* patch_clock_to_half_speed() {
#if defined(__x86_64__)
  static std::once_flag once;
  static const char* error = nullptr;
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
      error = "mprotect refused to make clock_gettime writable";
      return;
    }
    unsigned char jump[12] = {0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xe0};
    const auto addr = reinterpret_cast<uint64_t>(&half_speed_clock_gettime);
    std::memcpy(jump + 2, &addr, sizeof addr);
    std::memcpy(target, jump, sizeof jump);
    ::mprotect(start, len, PROT_READ | PROT_EXEC);
  });
  return error;
#else
  return "the clock patch is written for x86-64 only";
#endif
}

// Runs `call` with the clock at half speed for its duration (seen from this process afterwards).
template <class F>
auto with_half_speed_clock(F&& call) {
  const int64_t t0 = real_monotonic_ns();
  auto rc = call();
  stolen_ns += (real_monotonic_ns() - t0) / 2;
  return rc;
}

// --- the other calls of the process, slowed -----------------------------------------------------
inline std::atomic<bool> in_own_call{false};

inline void burn_unless_own_call(int) {
  if (!in_own_call.load()) spin_until_ns(real_monotonic_ns() + 800000);
}

// Arms the timer once, aimed at the calling thread (SIGEV_THREAD_ID): its handler runs in that
// thread, so the burn is that thread's CPU time, and no other thread shows.
inline void arm_burn_timer_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_handler = burn_unless_own_call;
    sa.sa_flags = SA_RESTART;
    ::sigemptyset(&sa.sa_mask);
    ::sigaction(SIGALRM, &sa, nullptr);
    sigevent ev{};
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGALRM;
    ev._sigev_un._tid = static_cast<pid_t>(::syscall(SYS_gettid));
    timer_t t{};
    if (::timer_create(CLOCK_MONOTONIC, &ev, &t) != 0) return;
    const itimerspec every{{0, 1000000}, {0, 1000000}};
    ::timer_settime(t, 0, &every, nullptr);
  });
}

// Runs `call` 1.5x slower than it is, then leaves the timer burning every other call.
template <class F>
auto slow_and_burn_others(F&& call) {
  in_own_call.store(true);
  const int64_t t0 = real_monotonic_ns();
  auto rc = call();
  const int64_t took = real_monotonic_ns() - t0;
  spin_until_ns(real_monotonic_ns() + took / 2);
  in_own_call.store(false);
  arm_burn_timer_once();
  return rc;
}

}  // namespace dg::cheats
