// Timing in a worker process: the candidates are timed (harness/bench_runner.h) in a process of
// their own, never in the one that holds the reference and the results, so a crash, a hang or a
// tampered timer during timing costs only that worker.
#pragma once

#include <string>
#include <vector>

#include "harness/bench_runner.h"

namespace dg {

struct TimingRequest {
  std::vector<std::string> candidates;
  std::string case_str;
  double max_time_s = 10;
  int min_repetitions = 7;
  // Adaptive stop between rounds (two candidates): the bootstrap interval of the ratio of their
  // medians at `confidence` is narrower than +-target_halfwidth (relative). 0: no early stop.
  double confidence = 0.95;
  double target_halfwidth = 0;
  double wall_seconds = 0;                 // 0: max_time_s * 4 + 120
  std::vector<std::string> extra_args;     // --plugin, --exec, --threads
};

// Times the candidates in a worker; throws std::runtime_error with the worker's status, message
// and stderr tail when it fails.
std::vector<BenchSamples> time_in_worker(const TimingRequest& req);

// The worker side (`driftgate bench-worker ...`): times, writes the samples as JSON to `report`.
int timing_worker_main(const TimingRequest& req, const std::string& report);

}  // namespace dg
