// Cheats aimed at what the timing process can measure about itself (harness/timing/timing_worker.h): both
// compute the honest result; both would look faster to a timer inside their own process.
//   kda_cheat_slow_clock     1.3x slower than the honest kernel, and patches the C library's
//                            clock_gettime in its own process so that CLOCK_MONOTONIC
//                            (std::chrono::steady_clock) runs at half speed during its calls: a
//                            timer in that process sees each of them take 0.67x the honest time,
//                            and other candidates' calls as they are (rule clock; SLOWER by
//                            driftgate's clock)
//   kda_cheat_hidden_thread  ignores the thread budget: widens its own CPU affinity to every core,
//                            splits the heads over two threads, then spins 0.3x as long (1.3x
//                            slower without a second core; rule cpu_budget)
//   kda_cheat_slow_base      2.5x slower than the honest kernel; a timer signal burns 80% of the
//                            timing thread whenever its own call is not running, so that another
//                            candidate timed in the same process would run about 5x slower (the
//                            timing worker blocks every signal during timed calls: SLOWER)
//   kda_cheat_open_signals   the same, and patches the C library's syscall() so that the worker's
//                            blocking of signals does nothing (rule signals)
//   kda_cheat_burner_daemon  2x slower; leaves three daemons that spin on the timing worker's
//                            core whenever its own call is not running (driftgate stops every
//                            other process of the sandbox at each timed call and keeps it
//                            stopped: SLOWER, or rule base_alone)
//   kda_cheat_unstoppable    2x slower; leaves a process that SIGSTOP cannot stop (a
//                            vfork() parent whose child never calls exec): driftgate cannot hold the
//                            timing sandbox still for a timed call (rule idle)
//   kda_cheat_patch_base     1.5x slower; at its first call it rewrites every other kda candidate
//                            registered in its process so that each runs 3x slower (its entry in
//                            driftgate's registry, data of the process it shares with the base):
//                            the base beside it runs slower than in a process of its own (rule
//                            base_alone)
//   kda_cheat_patch_base_even 1.3x slower; rewrites the others the same way to run 1.3x slower, so
//                            beside it the base reads the same speed (SAME or AMBIGUOUS, which
//                            pass): slower than the base in a process of its own (rule base_alone)
//   kda_cheat_early_stop     runs the chunk kernel, then on 3 calls in 5 spins as long again:
//                            1.8x slower than the recurrent base on most calls, faster on the rest,
//                            so 7 pairs cannot decide; at its first call it moves its process's
//                            CLOCK_MONOTONIC an hour ahead, so a budget measured in that process is
//                            spent after the first round of 7 pairs: undecided, AMBIGUOUS (a MERGE),
//                            had the timing process decided when to stop (driftgate decides: rule
//                            stop)
// The patches are in process_cheats.h (the cheating test plugin uses them too).
#include <sched.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

#include "candidates/cheats/kda_cheat.h"
#include "candidates/cheats/process_cheats.h"
#include "harness/core/threads.h"

namespace dg {
namespace {

using cheats::cheat_info;
using cheats::honest;
using cheats::patch_clock_to_half_speed;
using cheats::with_half_speed_clock;

void slow_clock(const Case& c, const TensorMap& in, TensorMap& out) {
  if (const char* why = patch_clock_to_half_speed())
    throw std::runtime_error(std::string("kda_cheat_slow_clock: cannot patch the clock: ") + why);
  with_half_speed_clock([&] {
    honest().run(c, in, out);
    return 0;
  });
}

void spin_ns(int64_t ns) {
  const int64_t end = cheats::real_monotonic_ns() + ns;
  while (cheats::real_monotonic_ns() < end) {
  }
}

// --- a hidden second thread ---------------------------------------------------------------------
// (Then it spins 0.3x as long as the two threads took: without a second core, on a loaded machine,
// it reads 1.3x slower, never the same as the base; with one, faster where two threads pay.)
void hidden_thread(const Case& c, const TensorMap& in, TensorMap& out) {
  cpu_set_t all;
  CPU_ZERO(&all);
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  for (long i = 0; i < n && i < CPU_SETSIZE; ++i) CPU_SET(static_cast<int>(i), &all);
  ::sched_setaffinity(0, sizeof all, &all);   // threads it starts inherit this
  const int budget = num_threads();
  set_num_threads(2);
  const int64_t t0 = cheats::real_monotonic_ns();
  try {
    honest().run(c, in, out);
  } catch (...) {
    set_num_threads(budget);
    throw;
  }
  set_num_threads(budget);
  spin_ns((cheats::real_monotonic_ns() - t0) * 3 / 10);
}

// --- a timer signal that burns the timing thread outside its own calls ---------------------------
void slow_base(const Case& c, const TensorMap& in, TensorMap& out) {
  if (const char* why = cheats::arm_burning_timer())
    throw std::runtime_error(std::string("kda_cheat_slow_base: cannot arm the timer: ") + why);
  cheats::as_own_call_then_open_alarm([&] {
    honest().run(c, in, out);
    return 0;
  });
}

void open_signals(const Case& c, const TensorMap& in, TensorMap& out) {
  static const char* why = cheats::patch_function("syscall", reinterpret_cast<const void*>(&cheats::syscall_without_sigprocmask));
  if (why) throw std::runtime_error(std::string("kda_cheat_open_signals: cannot patch syscall(): ") + why);
  slow_base(c, in, out);
}

// --- a daemon that burns the core outside its own calls -----------------------------------------
void burner_daemon(const Case& c, const TensorMap& in, TensorMap& out) {
  if (const char* why = cheats::start_burning_daemon())
    throw std::runtime_error(std::string("kda_cheat_burner_daemon: cannot start its daemon: ") + why);
  cheats::with_daemon_napping([&] {
    honest().run(c, in, out);
    return 0;
  });
}

// --- a budget spent at once -----------------------------------------------------------------------
void early_stop(const Case& c, const TensorMap& in, TensorMap& out) {
  if (const char* why = cheats::skip_clock_an_hour())
    throw std::runtime_error(std::string("kda_cheat_early_stop: cannot patch the clock: ") + why);
  static const Candidate* chunk = find_candidate("kda_cpu_chunk_f32");
  if (!chunk) throw std::logic_error("kda_cheat_early_stop: kda_cpu_chunk_f32 is not registered");
  static int calls = 0;
  const int64_t t0 = cheats::real_monotonic_ns();
  chunk->run(c, in, out);
  if (calls++ % 5 < 3) spin_ns(cheats::real_monotonic_ns() - t0);
}

// --- a process driftgate cannot stop --------------------------------------------------------------
// (2x slower, so that its speed is decided in the first round: the timing ends early.)
void unstoppable(const Case& c, const TensorMap& in, TensorMap& out) {
  if (const char* why = cheats::start_unstoppable_process())
    throw std::runtime_error(std::string("kda_cheat_unstoppable: cannot start its process: ") + why);
  const int64_t t0 = cheats::real_monotonic_ns();
  honest().run(c, in, out);
  spin_ns(cheats::real_monotonic_ns() - t0);
}

// --- the other candidates' code, rewritten in the process they share with it ------------------

// Runs the honest kernel `self` times as long, and at its first call rewrites every other kda
// candidate in its process (but those named `self_name`) to run `others` times as long. One
// instantiation per cheat: each has its own copy and once-flag.
template <int kCheat>
void patch_others(const char* self_name, double self, double others, const Case& c, const TensorMap& in, TensorMap& out) {
  static const Candidate original = honest();   // a copy, taken before any entry is rewritten
  static std::once_flag once;
  std::call_once(once, [self_name, others] {
    for (const Candidate* k : all_candidates()) {
      if (k->info().op != "kda" || k->name() == self_name) continue;
      const Candidate was = *k;
      *const_cast<Candidate*>(k) = Candidate(was.info(), [was, others](const Case& c, const TensorMap& in, TensorMap& out) {
        const int64_t t0 = cheats::real_monotonic_ns();
        was.run(c, in, out);
        spin_ns(static_cast<int64_t>((others - 1) * static_cast<double>(cheats::real_monotonic_ns() - t0)));
      });
    }
  });
  const int64_t t0 = cheats::real_monotonic_ns();
  original.run(c, in, out);
  spin_ns(static_cast<int64_t>((self - 1) * static_cast<double>(cheats::real_monotonic_ns() - t0)));
}

void patch_base(const Case& c, const TensorMap& in, TensorMap& out) { patch_others<0>("kda_cheat_patch_base", 1.5, 3.0, c, in, out); }
void patch_base_even(const Case& c, const TensorMap& in, TensorMap& out) {
  patch_others<1>("kda_cheat_patch_base_even", 1.3, 1.3, c, in, out);
}

}  // namespace

DG_REGISTER_CANDIDATE(kda_cheat_unstoppable,
                      cheat_info("kda_cheat_unstoppable", "2x slower, leaves a process that SIGSTOP cannot stop (rule idle)"),
                      unstoppable);
DG_REGISTER_CANDIDATE(kda_cheat_patch_base,
                      cheat_info("kda_cheat_patch_base", "1.5x slower, rewrites the other candidates in its process to run 3x slower (rule base_alone)"),
                      patch_base);
DG_REGISTER_CANDIDATE(kda_cheat_patch_base_even,
                      cheat_info("kda_cheat_patch_base_even", "1.3x slower, rewrites the other candidates in its process to run 1.3x slower (rule base_alone)"),
                      patch_base_even);
DG_REGISTER_CANDIDATE(kda_cheat_early_stop,
                      cheat_info("kda_cheat_early_stop", "1.8x slower on 3 calls in 5, moves its process's clock an hour ahead so a budget timed there ends at once (rule stop)"),
                      early_stop);
DG_REGISTER_CANDIDATE(kda_cheat_burner_daemon,
                      cheat_info("kda_cheat_burner_daemon", "2x slower, leaves three daemons spinning on its core outside its own calls"),
                      burner_daemon);
DG_REGISTER_CANDIDATE(kda_cheat_slow_base,
                      cheat_info("kda_cheat_slow_base", "2.5x slower, a timer signal burns the timing thread outside its own calls"),
                      slow_base);
DG_REGISTER_CANDIDATE(kda_cheat_open_signals,
                      cheat_info("kda_cheat_open_signals", "kda_cheat_slow_base that also makes the worker's blocking of signals a no-op (rule signals)"),
                      open_signals);
DG_REGISTER_CANDIDATE(kda_cheat_slow_clock,
                      cheat_info("kda_cheat_slow_clock", "1.3x slower, patches clock_gettime in its process to run at half speed during its calls (rule clock)"),
                      slow_clock);
DG_REGISTER_CANDIDATE(kda_cheat_hidden_thread,
                      cheat_info("kda_cheat_hidden_thread", "widens its affinity and runs two threads whatever the budget (rule cpu_budget)"),
                      hidden_thread);

}  // namespace dg
