// Timing in a worker process, judged from outside it.
//
// The candidates are timed (harness/timing/bench_runner.h) in a process of their own (`driftgate
// bench-worker`, started by run_worker_args in the worker sandbox), never in the one that holds the
// reference, the results and the verdict, so a crash or a hang during timing costs only that
// worker.
//
// Trust model. Candidate code runs in the timing worker, so everything measured in there (its
// steady clock, its CPU clock, its own sample bookkeeping) is the candidate's to forge: a plugin
// can patch clock_gettime so that the worker's clock runs at half speed, or start a hidden second
// thread. The verdict therefore rests on what driftgate's own process measures:
//   - the channel: two pipes, the worker's descriptors 3 (from driftgate) and 4 (to driftgate).
//     Before every timed call the worker sends "ready" (the candidate's index) and waits; driftgate
//     waits until the worker's thread is blocked (/proc/PID/stat), reads the worker's CPU time
//     from outside (clock_getcpuclockid(pid): every thread; plus the CPU time of children it has
//     reaped, from /proc/PID/stat, for exec candidates), reads its own steady clock and answers
//     "go". The worker runs the call and sends "done" with its own time of the call; driftgate
//     reads its clock, waits until the worker is blocked again, reads the CPU time, and answers
//     "continue". Warm-up and re-run calls are untimed and not bracketed.
//   - the sample of a host call is driftgate's interval (go to done: the call plus two pipe
//     wake-ups, the same for base and patch, so the ratio is only pulled towards 1). A device
//     candidate's sample stays the device time its worker measured (events), and must not exceed
//     driftgate's interval.
//   - rule clock: the worker's own times are compared with driftgate's. Per call, the time the
//     call had is driftgate's interval less the time driftgate's serving thread and the worker's
//     main thread waited for a CPU within it (/proc/thread-self/schedstat and /proc/PID/schedstat
//     run_delay, the kernel's counters); its remainder is that less the worker's own time. An
//     honest call's remainder is the exchange and the wake-ups a virtual machine does not count as
//     waits (a median of 171 us seen on 300 us calls of a loaded 2-core VM), whatever the load
//     (threads that keep the CPUs busy after the call only delay the "done", a wait); a clock at
//     half speed leaves half of what its main thread ran or slept through, less its waits. Over the half of the calls whose main
//     thread waited least, the median of (remainder - 3 pipe round trips (the median of 16 no-op
//     exchanges per worker) - 300 us - 10% of the time the call had) must not be positive; else the
//     candidate's clock disagrees with driftgate's, and the samples are INVALID. A cheat whose
//     every call is starved for half its time hides from the rule; it gains nothing by it (the
//     verdict uses driftgate's clock whatever the worker says; the rule makes the attempt visible).
//   - rule cpu_budget: the worker is pinned to the cores it is granted (the worker pins itself
//     before loading any plugin, and driftgate pins every thread it has once it runs); a candidate
//     may widen its own affinity, so CPU time is judged too: its CPU time over all its timed calls
//     divided by driftgate's time of those calls may not exceed the granted threads x 1.25 (plus
//     20 ms + 10 ms x sqrt(calls) for the 10 ms ticks of reaped children's CPU time). With one
//     thread granted, the time the worker's main thread waited for a CPU (/proc/PID/schedstat
//     run_delay) is taken off driftgate's time, so that on a loaded machine, where two threads
//     get no more than one core's worth, a second thread still shows; and the CPU time of the
//     worker's threads other than its main thread (process CPU clock - /proc/PID/schedstat's
//     run time of the main thread, children excluded) may not exceed a tenth of the calls' CPU
//     time (+ 1 ms; not for device candidates, whose driver runs threads of its own). Granted:
//     --threads N when given, else every core this process may use.
//   - rule signals: the worker blocks every signal (the raw system call: the C library's own two as
//     well) before anything else runs in it, so every thread it or a plugin starts inherits the
//     mask, and again before every timed call; exec programs start with none blocked. A signal
//     handler can then run in no candidate's timed call: a patch whose timer signal burns the
//     timing thread outside its own calls read 2.46x FASTER though 2.5x slower (T=1024, --threads 1)
//     when the mask was left open, and reads 0.40x SLOWER so. Before answering "go" driftgate reads
//     the worker's main thread's blocked signals (/proc/PID/status SigBlk); a timed call that began
//     with any signal open (a candidate patched the code that blocks them) makes every candidate's
//     samples INVALID, as whose call a handler ran in cannot be told.
//   - hold: for every timed call driftgate stops (SIGSTOP) every other process of the worker's
//     sandbox (harness/isolation/sandbox.h stop_sandbox_processes: the init's descendants but the worker
//     itself, whatever groups and sessions they made) before it answers "go", and keeps them
//     stopped until the worker ends: a process a candidate left running, or a plugin's child,
//     cannot take a core or memory bandwidth from any candidate's call, nor from the untimed work
//     between calls (a patch 2x slower whose three daemons spun on the worker's core outside its
//     own calls read 1.18-1.24x FASTER, MERGE; continued between calls, under load they left it
//     undecided, AMBIGUOUS; kept stopped, 0.50-0.65x SLOWER). A process that cannot be stopped within 200 ms voids every candidate's samples (rule
//     idle). What a call starts itself (an exec program) runs.
//   - rule stop: when the comparison ends is driftgate's decision too. After each round the worker
//     asks ("Q"); driftgate answers "stop" once its own samples decide (stats.h speed_should_stop
//     on its intervals, its clock since the first timed call, the policy's budget) or the pairs
//     reach kMaxTimedPairs, else "keep going"; the worker's own budget is only a bound (twice the
//     policy's plus 5 s). A worker that ends the timing before that answer voids every candidate's
//     samples: a patch whose first 7 pairs cannot decide, and that moves its process's clock an
//     hour ahead so that a budget kept there is spent at once, would otherwise end undecided,
//     AMBIGUOUS, a MERGE (kda_cheat_early_stop). (With the worker deciding on its own clock, an
//     honest comparison also ended on samples the outside clock did not find decided: 1 of 12
//     gates of a 2x slower canary under load read AMBIGUOUS at 7 pairs.)
//   - rule base_alone: a gate's base is also timed in a second worker of its own (`driftgate
//     bench-worker` with the base alone, loading no other candidate's plugin or program), started
//     beside the shared one and pinned to the same cores. The two take turns: one timed call at a
//     time, the alone worker's after every round of the shared one's while the shared one waits for
//     its next call, and each call holds every process of the other worker's sandbox stopped (its
//     worker too), so neither runs beside the other. The base's calls in the shared process may not be slower than its calls alone: the
//     lower end of the 95% bootstrap interval of median(beside) / median(alone) above 1.10 makes
//     every candidate's samples INVALID, as does a base timed fewer than 5 times in either. Whatever
//     the means (a rewrite of the base's code or of driftgate's registry entry for it, threads that
//     take its cores within the budget, memory bandwidth, cache), a patch gains at most that 10%
//     by slowing the base. The speed verdict still compares base and patch in the shared process,
//     call by call. Host candidates only: a device candidate's time is the device's.
//   - the worker's report and driftgate's record must agree on how many timed calls each
//     candidate made; a worker that talks out of turn on the channel is an internal error of
//     that worker (timed run failed).
// Google Benchmark keeps its role inside the worker: it orders the calls (random interleaving of
// base and patch) and shapes the rounds; compare.py's JSON is written from driftgate's samples.
//
// Not covered: base and patch share one timing process, so that their calls interleave one by one
// (a drift in the machine's speed falls on both alike), and rule base_alone bounds what a patch can
// take from the base there. The verdict is not timed in a worker per candidate because that read
// honest pairs wrongly on a loaded 2-core machine: in fresh workers of their own, in alternating
// blocks, honest pairs read 2.3x FASTER and 0.79x SLOWER with narrow intervals (the blocks see
// different loads); in concurrent workers, one per candidate, served in a random order, the
// recurrent/chunk pair at T=1024, H=2, HV=4 read 0.77x-1.26x over four runs where one process reads
// 1.06-1.09x every time (25-50% of the calls' main threads waited over 1 ms for a CPU, against
// about 1% in one process); with every waiting worker's sandbox stopped and all pinned to the
// granted core, A/A pairs read 1.005-1.011 but the recurrent/chunk pair 1.08-1.25x or 1.00-1.11x
// depending on which worker prepared its inputs first. The same kernel in two such processes (the
// base, beside and alone) agrees closely, which is what rule base_alone compares. Which candidate a
// "ready" names is the worker's word. A candidate that works in a background thread between its
// timed calls is charged for it only while a call is timed. Timing on a shared, loaded machine
// stays noisy: the intervals carry the noise.
#pragma once

#include <string>
#include <vector>

#include "harness/timing/bench_runner.h"

namespace dg {

struct TimingRequest {
  std::vector<std::string> candidates;
  std::string case_str;
  double max_time_s = 10;
  int min_repetitions = 7;
  int max_repetitions = 0;   // 0: BenchOptions' default (200); a comparison's stop rule raises it
  // Adaptive stop between rounds (two candidates): the bootstrap interval of the ratio of their
  // medians at `confidence` is narrower than +-target_halfwidth (relative). 0: no early stop.
  double confidence = 0.95;
  double target_halfwidth = 0;
  // A decided early stop (stats.h speed_should_stop; two candidates): the interval at this level
  // gives a verdict at min_effect. 1: none.
  double interim_confidence = 1, min_effect = 0.03;
  double wall_seconds = 0;                 // 0: max_time_s * 4 + 120
  std::vector<std::string> extra_args;     // --plugin, --exec, --threads
  // Rule base_alone (gate): the first candidate is also timed in a worker of its own, and its calls
  // beside the others may not be slower than those (host candidates only).
  bool base_alone = false;
  std::vector<std::string> base_args;     // the alone worker's --plugin / --exec / --threads
  // The thread budget; 0: --threads in extra_args when there, else every core this process may use.
  int threads = 0;
  // Worker side only: the channel (descriptors 3 and 4) is open, and the cores to pin to first.
  bool channel = false;
  std::string cpus;
};

// Times the candidates in a worker, from outside (see the top). Throws std::runtime_error with the
// worker's status, message and stderr tail, and the candidate being timed when it failed.
std::vector<BenchSamples> time_in_worker(const TimingRequest& req);

// The worker side (`driftgate bench-worker ...`): times, writes the samples as JSON to `report`.
int timing_worker_main(const TimingRequest& req, const std::string& report);

// Judges one candidate's samples (exposed for the tests): `wall` driftgate's interval per timed
// call, `self` the worker's own time, `cpu` CPU time read from outside, `delay` the time its main
// thread waited for a CPU, `other` the CPU time of its other threads (children excluded),
// `round_trip` the median no-op exchange, `threads` the budget,
// `children_ticks` whether CPU time came from reaped children (10 ms ticks), `observer_delay` the
// time driftgate's own timing thread waited for a CPU within each interval while the worker's main
// thread slept (a busy machine keeps driftgate from reading the end; that wait is not the
// candidate's clock running slow, and the verdict's sample keeps it). Returns "" or the broken
// rules ("rule clock: ...; rule cpu_budget: ...").
std::string judge_timing(const std::string& candidate, const std::vector<double>& wall, const std::vector<double>& self,
                         const std::vector<double>& cpu, const std::vector<double>& delay,
                         const std::vector<double>& other, double round_trip, int threads, bool children_ticks,
                         const std::vector<double>& observer_delay = {});

// Rule base_alone: the base beside the patch may be at most this much slower than alone (the lower
// end of the 95% interval of the ratio of their medians). Honest pairs read 0.72-1.29 on a loaded
// 2-core machine, the lower end of the interval at most 1.00 (README).
constexpr double kBaseAloneTolerance = 0.10;
// A case that broke only rule base_alone is timed again, at most this many times (speed.cpp,
// measure_speed): until a retime clears it or breaks it.
constexpr int kBaseAloneRetimes = 2;
// A timing whose base ran beside the patch at less than this fraction of its time alone does not
// settle the rule: its alone worker ran so slow that it would hide a slowdown of 1.2x (speed.h).
constexpr double kBaseAloneHiddenBelow = 1 / 1.2;

// Rule base_alone's second half (exposed for the tests): "" or why `candidate` (its times beside
// the base, `seconds`) is slower than the base timed in a process of its own (`base_alone`) by more
// than the rule's tolerance of 10%, i.e. the 95% interval of median(base_alone) / median(seconds)
// lies wholly below 1 / 1.1, while beside the base (`base_beside`) it did not read as slow (where
// it did, the speed verdict is SLOWER and rejects it without this rule).
std::string slower_than_base_alone(const std::string& candidate, const std::vector<double>& seconds,
                                   const std::string& base, const std::vector<double>& base_beside,
                                   const std::vector<double>& base_alone);

}  // namespace dg
