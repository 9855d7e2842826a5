// Throughput rows: timing samples (harness/timing/bench_runner.h) turned into medians with intervals,
// GB/s, GFLOP/s and % of this machine's limit (harness/timing/machine.h), and the base/patch speedup of
// the gate with its verdict (harness/metrics/stats.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "harness/timing/bench_runner.h"
#include "harness/judge/gate.h"
#include "harness/timing/machine.h"
#include "harness/judge/policy.h"

namespace dg {

struct Throughput {
  double median_s = 0, lo_s = 0, hi_s = 0;   // median time per call and its 95% bootstrap interval
  double noise = 0;                          // relative noise (1.4826 MAD / median)
  int samples = 0;
  double gflops = 0, gbs = 0;
  // The op's physical floor on this machine: max(bytes / all-core triad bandwidth, flops / all-core
  // f32 FMA peak). pct_of_limit = floor / median; a median below the floor is impossible for honest
  // work and makes the row INVALID.
  double floor_s = 0, pct_of_limit = 0;
  bool below_physical_bound = false;
  // Device candidates: seconds are device time, the floor is bytes / the device's memory
  // bandwidth, and the call's host wall time gives the host overhead 1 - device / wall (medians).
  bool device = false;
  double wall_median_s = 0, host_overhead = 0, peak_gbs = 0;
};

// `storage`: the candidate's dtypes (the bytes it moves depend on them).
Throughput throughput_of(const std::vector<double>& seconds, const Case& c, const MachineLimits& m,
                         const Storage& storage = {});
Throughput throughput_of(const BenchSamples& s, const Case& c, const MachineLimits& m);

// Times base and patch interleaved on one case within the policy's time budget, stopping early
// once the speedup interval is narrow enough; fills the gate's SpeedRow (timed outputs that differ
// from an untimed re-run are reported in `inconsistent`, which speed_checks turns into a failure).
// The SpeedRow of two candidates' samples (base first, patch second).
SpeedRow speed_row(const std::vector<BenchSamples>& samples, const Case& c, const Policy& p, const MachineLimits& m);

// Rule base_alone settled by a timing (the base's samples: BenchSamples::alone_*): the base's median
// beside the patch over its median alone lies within [kBaseAloneHiddenBelow, 1.1]: not slower beside
// than the rule's tolerance, and its alone worker not so slow that it would hide a slowdown (a
// timing that merely did not break the rule can: a 1.3x cheat read 0.45x). The point estimate, not
// the interval: at the policies' short budgets on a loaded machine, honest intervals of the ratio
// are too wide to lie within 10% (0.98x [0.90, 1.03], 0.86x [0.55, 1.02]). Not measured (a device
// patch): settled. Nor does a timing whose alone worker timed the base in fewer rounds than the
// shared one (it ended early: the two medians would cover different windows). measure_speed times a case again, in fresh workers, until a timing settles the
// rule or breaks a rule (at most kBaseAloneRetimes more times); unsettled to the end, the case is
// CANNOT_JUDGE (SpeedRow::unsettled), or INVALID where the first timing broke the rule.
bool base_alone_settled(const BenchSamples& base);

// One timing of a case: its samples (base first) and its row.
struct Timing {
  std::vector<BenchSamples> samples;
  SpeedRow row;
};
// Rule base_alone settled over a case's timings (speed.cpp says how; exposed for the tests): `first`
// and `r` the first timing, `time_again` one more timing in fresh workers. Returns the row.
SpeedRow settle_base_alone(const std::string& base, const std::vector<BenchSamples>& first, SpeedRow r,
                           const std::function<Timing()>& time_again);

// Timing runs in a worker process (harness/timing/timing_worker.h); extra_args are forwarded to it, and
// base_args to the worker that times the base alone (rule base_alone: the outside candidate
// arguments that bring the base and nothing else, exec_candidate.h outside_args_of). The worker is
// killed after wall_seconds (0: TimingRequest's default); a worker that crashes, hangs or fails
// throws std::runtime_error with its status, which the gate turns into an ERRORED check.
SpeedRow measure_speed(const Candidate& base, const Candidate& patch, const Case& c, const Policy& p,
                       const MachineLimits& m, const std::vector<std::string>& extra_args,
                       const std::vector<std::string>& base_args, double wall_seconds = 0);

}  // namespace dg
