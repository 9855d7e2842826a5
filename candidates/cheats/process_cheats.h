// Attacks on what a timing process can measure about itself, shared by the built-in timing canaries
// (kda_timing_trust_cheats.cpp) and the cheating test plugins (tests/attacks/timing_cheat_plugin.cpp).
// Header-only and free of driftgate's own types, so that a plugin built on the C ABI alone can use
// it. Each attack runs in the process of the candidate that uses it; driftgate's defence is to
// measure from outside that process (harness/timing/timing_worker.h).
//
//   half-speed clock   patches the C library's clock_gettime so that CLOCK_MONOTONIC loses `stolen`
//                      nanoseconds: a cheat adds half of each of its calls, and a timer in its
//                      process sees each call take half as long (rule clock)
#pragma once

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>

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

// Overwrites the start of the C library's function `symbol` with a jump to `replacement` (x86-64:
// movabs rax, imm64; jmp rax). Returns nullptr, or why it cannot (other architectures, W^X).
inline const char* patch_function(const char* symbol, const void* replacement) {
#if defined(__x86_64__)
  auto* target = reinterpret_cast<unsigned char*>(::dlsym(RTLD_DEFAULT, symbol));
  if (!target) return "no such function to patch";
  const long page = ::sysconf(_SC_PAGESIZE);
  auto* start = reinterpret_cast<unsigned char*>(reinterpret_cast<uintptr_t>(target) & ~static_cast<uintptr_t>(page - 1));
  const size_t len = static_cast<size_t>(target + 16 - start);
  if (::mprotect(start, len, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return "mprotect refused to make it writable";
  unsigned char jump[12] = {0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xe0};
  const auto addr = reinterpret_cast<uint64_t>(replacement);
  std::memcpy(jump + 2, &addr, sizeof addr);
  std::memcpy(target, jump, sizeof jump);
  ::mprotect(start, len, PROT_READ | PROT_EXEC);
  return nullptr;
#else
  (void)symbol, (void)replacement;
  return "function patches are written for x86-64 only";
#endif
}

// --- a clock that jumps an hour ahead --------------------------------------------------------------
inline std::atomic<int64_t> skipped_ns{0};

inline int skipping_clock_gettime(clockid_t id, timespec* ts) {
  const long rc = ::syscall(SYS_clock_gettime, id, ts);
  if (rc != 0 || id != CLOCK_MONOTONIC) return static_cast<int>(rc);
  const int64_t now = int64_t{ts->tv_sec} * 1000000000 + ts->tv_nsec + skipped_ns.load();
  ts->tv_sec = now / 1000000000;
  ts->tv_nsec = now % 1000000000;
  return 0;
}

// Patches clock_gettime with the function above, once, and moves the clock an hour ahead: whatever
// in the process measures a budget from before this call finds it spent.
inline const char* skip_clock_an_hour() {
  static std::once_flag once;
  static const char* error = nullptr;
  std::call_once(once, [] {
    error = patch_function("clock_gettime", reinterpret_cast<const void*>(&skipping_clock_gettime));
    if (!error) skipped_ns.store(int64_t{3600} * 1000000000);
  });
  return error;
}

// Patches clock_gettime with the function above, once.
inline const char* patch_clock_to_half_speed() {
  static std::once_flag once;
  static const char* error = nullptr;
  std::call_once(once, [] { error = patch_function("clock_gettime", reinterpret_cast<const void*>(&half_speed_clock_gettime)); });
  return error;
}

// --- a timer signal that burns the thread outside the cheat's own calls ---------------------------
// A POSIX timer sends SIGALRM to the thread that armed it every millisecond; its handler spins for
// 0.8 ms unless the cheat's own call is running. Where that thread takes signals during another
// candidate's calls, they run about 5x slower. The cheat opens SIGALRM in its own calls
// (pthread_sigmask), so after them the thread takes it until something blocks it again.
inline std::atomic<bool> in_own_call{false};

inline void burn_unless_own_call(int) {
  if (in_own_call.load()) return;
  const int64_t end = real_monotonic_ns() + 800000;
  while (real_monotonic_ns() < end) {
  }
}

// Arms the timer for the calling thread, once. Returns nullptr, or why it cannot.
inline const char* arm_burning_timer() {
  static std::once_flag once;
  static const char* error = nullptr;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_handler = burn_unless_own_call;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(SIGALRM, &sa, nullptr) != 0) {
      error = "sigaction refused";
      return;
    }
    sigevent ev{};
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGALRM;
    ev._sigev_un._tid = static_cast<pid_t>(::syscall(SYS_gettid));
    timer_t timer{};
    if (::timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0) {
      error = "timer_create refused";
      return;
    }
    itimerspec its{};
    its.it_interval.tv_nsec = 1000000;
    its.it_value.tv_nsec = 1000000;
    if (::timer_settime(timer, 0, &its, nullptr) != 0) error = "timer_settime refused";
  });
  return error;
}

// Runs `call` as the cheat's own call (the handler does not burn in it), then spins for 1.5x its
// time (a kernel 2.5x slower than the one it wraps: slower by far than noise, and still faster than
// a base slowed 5x); SIGALRM is left open in this thread.
template <class F>
auto as_own_call_then_open_alarm(F&& call) {
  in_own_call.store(true);
  const int64_t t0 = real_monotonic_ns();
  auto rc = call();
  const int64_t end = real_monotonic_ns() + (real_monotonic_ns() - t0) * 3 / 2;
  while (real_monotonic_ns() < end) {
  }
  sigset_t alarm;
  sigemptyset(&alarm);
  sigaddset(&alarm, SIGALRM);
  ::pthread_sigmask(SIG_UNBLOCK, &alarm, nullptr);
  in_own_call.store(false);
  return rc;
}

// Starts `body` in a daemon: forked twice, in a session of its own, its parent reaped. false when
// fork is refused.
inline bool start_daemon(void (*body)()) {
  const pid_t child = ::fork();
  if (child < 0) return false;
  if (child == 0) {
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    body();
    ::_exit(0);
  }
  ::waitpid(child, nullptr, 0);
  return true;
}

// --- processes left running that burn a CPU outside the cheat's own calls ------------------------
// Three daemons (each forked twice, in a session of its own) spin whenever the flag they share with
// the cheat is 0 and nap while it is 1 (the cheat's own call). They inherit the cheat's CPU
// affinity, so with one core granted they take three quarters of that core from any other
// candidate's calls.
inline std::atomic<int>* own_call_flag = nullptr;

// Starts the daemons, once. Returns nullptr, or why it cannot.
inline const char* start_burning_daemon() {
  static std::once_flag once;
  static const char* error = nullptr;
  std::call_once(once, [] {
    void* shared = ::mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
      error = "mmap refused";
      return;
    }
    own_call_flag = new (shared) std::atomic<int>(0);
    for (int d = 0; d < 3; ++d)
      if (!start_daemon([] {
            for (;;) {
              if (own_call_flag->load() == 0) continue;
              timespec nap{0, 20000};
              ::nanosleep(&nap, nullptr);
            }
          })) {
        error = "fork refused";
        return;
      }
  });
  return error;
}

// Runs `call` as the cheat's own call (the daemons nap), then spins for as long again (a kernel 2x
// slower than the one it wraps: slower by far than noise, and faster than a base the daemons slow:
// 2.6x measured, the scheduler favouring the woken timing thread over them).
template <class F>
auto with_daemon_napping(F&& call) {
  own_call_flag->store(1);
  const int64_t t0 = real_monotonic_ns();
  auto rc = call();
  const int64_t end = real_monotonic_ns() + (real_monotonic_ns() - t0);
  while (real_monotonic_ns() < end) {
  }
  own_call_flag->store(0);
  return rc;
}

// --- a process that SIGSTOP cannot stop ----------------------------------------------------------
// A daemon calls vfork() and its child naps in a loop without ever calling exec: the daemon waits
// for that child in an uninterruptible (killable only) sleep, where a stop signal stays pending and
// never takes effect. Started once; returns nullptr, or why it cannot.
inline const char* start_unstoppable_process() {
  static std::once_flag once;
  static const char* error = nullptr;
  std::call_once(once, [] {
    if (!start_daemon([] {
          if (::vfork() == 0)
            for (;;) {   // the vfork child shares its parent's memory: it touches nothing, and never returns
              timespec nap{0, 1000000};
              ::syscall(SYS_nanosleep, &nap, nullptr);
            }
        }))
      error = "fork refused";
  });
  return error;
}

// The C library's syscall() with rt_sigprocmask made a no-op (every other call made as asked, by a
// system call of its own): a process that blocks signals through syscall() keeps them open.
inline long syscall_without_sigprocmask(long nr, long a, long b, long c, long d, long e) {
#if defined(__x86_64__)
  if (nr == SYS_rt_sigprocmask) return 0;
  // syscall(nr, a1..a5) arrives as (rdi, rsi, rdx, rcx, r8, r9); the kernel takes rax, rdi, rsi,
  // rdx, r10, r8.
  long ret;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8) : "rcx", "r11", "memory");
  if (ret < 0 && ret > -4096) {
    errno = static_cast<int>(-ret);
    return -1;
  }
  return ret;
#else
  (void)nr, (void)a, (void)b, (void)c, (void)d, (void)e;
  return -1;
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
