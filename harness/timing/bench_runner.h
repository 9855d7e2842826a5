// driftgate bench, the timing part: one timed call per sample, candidates interleaved, fresh input
// contents and addresses for every call, and the timed calls' outputs checked afterwards.
//
// Device candidates (CUDA): each timed call runs inside a DeviceTimingScope, and when the call ran
// device work its sample is the device time the candidate measured (events, L2 flushed, clock
// checked; harness/timing/device_timing.h), with the host wall time kept beside it.
//
// Timing runs through Google Benchmark used as a library (1.7.x). Each round registers one benchmark
// per candidate at run time (benchmark::RegisterBenchmark) with Iterations(1), Repetitions(n) and
// UseManualTime(): one repetition is one call of the candidate, timed with a steady clock around the
// call only. Random interleaving is the library's own --benchmark_enable_random_interleaving, set
// through benchmark::Initialize with a synthesized argv: it shuffles all repetitions of all the
// round's benchmarks into one order (std::random_device, so the order is not reproducible; the
// samples themselves carry no order dependence). A custom BenchmarkReporter keeps every repetition's
// time, not only the aggregates; the library prints nothing.
//
// Rounds: the first has min_repetitions per candidate; after each round the stop hook is asked and
// the time budget checked, and the next round (each candidate the same count, so every round is a
// balanced, shuffled block) grows by half the repetitions so far, capped by what the remaining
// budget affords at the measured pace. Before the first round every candidate makes one untimed
// warm-up call.
//
// Fresh inputs. `input_sets` slots of inputs are prepared up front, each in its own allocations, and
// calls take them round robin (one counter over all candidates), so consecutive calls never share a
// buffer. A few slots hold generate_inputs of the case with derived seeds (c.with("seed", ...)); the
// others are copies of those rotated along axis 1. After every call (untimed) its slot is rotated
// along axis 1 within each index of axis 0 (every float input of rank >= 2: a cyclic shift of the
// tokens of [B,T,...] tensors, of the heads of h0), the j-th such input in name order by j + 1
// indices (inputs moved together could leave the result unchanged: gemm's x and w along K), so a
// slot does not show the same contents twice at its address until the rotation comes round (T
// visits for KDA). The values stay draws of the same regime. Seeds differ per call of time_candidates in a process, so a
// content-keyed cache cannot carry results from one benchmark run (or from verify) into the next.
// Each slot's contents are hashed after it moves on (not just before a call, which would warm the
// cache); the hash identifies what every call saw.
//
// Outputs rotate through per-candidate slots too: poisoned with the format's quiet NaN (guard.h;
// in-out tensors zero-filled as run_candidate allocates them), the poison written right after the
// previous use, not just before the call. After each call, untimed, its outputs are hashed
// and its inputs checked against their hash. Afterwards, outside timing:
//   - re-run: up to 8 of a candidate's timed calls, on distinct slots, run again untimed on a fresh
//     copy (new address) of the inputs that call saw; their outputs must equal the timed call's
//     bitwise. Calls on a slot the candidate had used before come first (a seeded sample), as that
//     is where a result cached by address is handed back. Catches address-keyed caches, skipped
//     work and nondeterminism.
//   - replay: two calls of one candidate on different input contents must not return bitwise
//     identical outputs. Catches results cached by a content fingerprint (which fool a re-run too),
//     and batch-and-skip calls that hand back an earlier call's outputs.
//   - a call that wrote to its inputs, or replaced an output tensor instead of writing into it.
//
// Outside timing: this file's clock runs in the candidate's process, so what it measures is the
// candidate's to forge (it can patch clock_gettime, or scale what the timer sees). When the
// options carry a TimedCallHook (the timing worker's pipe to driftgate, harness/timing/timing_worker.h),
// every timed call is bracketed by hook->begin (just before the clock starts) and hook->end (just
// after it stops, with this process's own time of the call), and the process that judges times
// the call with its own clock and reads this process's CPU time from outside. Warm-up calls and
// re-runs are not bracketed.
//
// Google Benchmark's registry and flags are process-wide: time_candidates serialises itself, owns
// the registry while it runs (it clears the registered benchmarks after every round) and leaves its
// flags set.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/cases/case.h"
#include "harness/cases/registry.h"

namespace dg {

// Called around every timed call (see the top); begin and end run in the timing loop's thread.
struct TimedCallHook {
  virtual ~TimedCallHook() = default;
  virtual void begin(int cand) = 0;
  virtual void end(int cand, double self_seconds) = 0;
};

struct BenchOptions {
  // Wall-time budget of the timed rounds (warm-up, timed calls and the untimed work between them),
  // not counting input preparation and the checks afterwards. min_repetitions always run.
  double max_time_s = 10;
  int min_repetitions = 5;
  int max_repetitions = 200;   // comparisons with a stop rule raise it to kMaxTimedPairs (stats.h)
  // 0: enough sets that their total bytes exceed 2x the last-level cache (auto_input_sets).
  int input_sets = 0;
  uint64_t seed = 0;        // input seeds and the re-run sample
  bool interleave = true;   // false: each round runs candidate 0's repetitions, then candidate 1's...
  // Adaptive stopping: asked after every round with each candidate's samples so far (seconds per
  // call) and the elapsed budget; true stops. May be empty.
  std::function<bool(const std::vector<std::vector<double>>& samples_per_candidate, double elapsed_s)> stop;
  TimedCallHook* hook = nullptr;   // outside timing (see the top); not owned
};

struct BenchSamples {
  std::string candidate;
  // One per timed call, in call order: the reporter's time, which is the call's device time for a
  // candidate that ran device work (harness/timing/device_timing.h) and its host wall time otherwise.
  std::vector<double> seconds;
  std::vector<double> cpu_seconds;   // process CPU time of the same calls (all threads)
  // Device candidates only (else empty / 0): the host wall time of each call's launches, the
  // launches measured again after a clock drop, and the device's memory bandwidth.
  std::vector<double> wall_seconds;
  int throttled = 0;
  int low_clock = 0;                 // launches kept at a dropped clock after three re-measures
  double device_peak_gbs = 0;
  std::string device;
  int64_t calls = 0;                 // every call time_candidates made: warm-up, timed and re-runs
  int rerun_picks = 0;               // timed calls picked for a re-run (one per input set used, at most 8)
  int reruns = 0;                    // of those, re-runs compared bitwise with their timed call
  bool outputs_consistent = true;
  std::string inconsistency;         // the first problem: which call and which tensor (and how many more)
  // Outside timing (time_in_worker): `seconds` are driftgate's own clock's (device candidates: the
  // device time, checked against it); `self_seconds` what the candidate's process measured itself,
  // `cpu_seconds` its CPU time per call read from outside. A broken timing rule ("rule clock: ...",
  // "rule cpu_budget: ...") makes the samples INVALID: the gate rejects, bench flags the row.
  std::vector<double> self_seconds;
  std::string invalid;
  // Rule base_alone (the first candidate of a gate's timing): its median time beside the others over
  // its median time in a worker of its own, with the 95% interval, and the calls alone (0: not
  // measured).
  double alone_ratio = 0, alone_lo = 0, alone_hi = 0;
  int alone_calls = 0;
  std::string alone_invalid;         // rule base_alone's finding when broken (also in `invalid`)
};

// Times every candidate on the case. Throws InputError when a candidate does not implement the
// case's op or the options are out of range, and std::runtime_error when a candidate throws (its
// name, the call and the message).
std::vector<BenchSamples> time_candidates(const std::vector<const Candidate*>& cands, const Case& c,
                                          const BenchOptions& opt);

// JSON in the format Google Benchmark's JSONReporter writes, readable by its tools/compare.py:
// "context" (the library's machine fields, then `context`'s entries) and "benchmarks": for every
// candidate one "iteration" row per repetition, named "<candidate>/<case>", with run_name,
// family_index, per_family_instance_index, run_type, repetitions, repetition_index, threads,
// iterations 1, real_time, cpu_time and time_unit "ns", followed (two repetitions or more) by the
// aggregate rows _mean, _median, _stddev and _cv as the library computes them. A candidate whose
// outputs were inconsistent carries the reason as its "label".
std::string compare_py_json(const std::vector<BenchSamples>& samples, const Case& c, const nlohmann::json& context);

// The size of the largest cache level sysfs reports for cpu0 (bytes); 32 MiB when sysfs says nothing.
int64_t last_level_cache_bytes();

// Input sets whose total exceeds 2x `llc_bytes`: floor(2 llc / set) + 1, at least 2, at most 512,
// and (above 2) at most a quarter of `memory_bytes` in total (<= 0: no memory limit). time_candidates
// passes the available memory scaled by inputs / (inputs + every candidate's outputs), as each slot
// holds both.
int auto_input_sets(int64_t set_bytes, int64_t llc_bytes, int64_t memory_bytes);

}  // namespace dg
