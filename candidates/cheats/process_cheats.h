// Attacks on what a timing process can measure about itself, shared by the built-in timing canaries
// (kda_timing_trust_cheats.cpp) and the cheating test plugins (tests/attacks/timing_cheat_plugin.cpp).
// Header-only and free of driftgate's own types, so that a plugin built on the C ABI alone can use
// it. Each attack runs in the process of the candidate that uses it; driftgate's defence is to
// measure from outside that process (harness/timing_worker.h).
//
//   half-speed clock   patches the C library's clock_gettime so that CLOCK_MONOTONIC loses `stolen`
//                      nanoseconds: a cheat adds half of each of its calls, and a timer in its
//                      process sees each call take half as long (rule clock)
#pragma once

#include <dlfcn.h>
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

// Runs `call`, then spins for a third of its time (a kernel 1.3x slower than the one it wraps),
// with the clock at half speed for the whole of it (seen from this process afterwards): a timer in
// this process sees 0.67x the wrapped kernel's time, "1.5x faster"; driftgate's sees 1.3x slower.
template <class F>
auto with_half_speed_clock(F&& call) {
  const int64_t t0 = real_monotonic_ns();
  auto rc = call();
  const int64_t end = real_monotonic_ns() + (real_monotonic_ns() - t0) * 3 / 10;
  while (real_monotonic_ns() < end) {
  }
  stolen_ns += (real_monotonic_ns() - t0) / 2;
  return rc;
}

}  // namespace dg::cheats
