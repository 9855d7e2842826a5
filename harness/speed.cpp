#include "harness/speed.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "harness/stats.h"

namespace dg {

Throughput throughput_of(const std::vector<double>& seconds, const Case& c, const MachineLimits& m) {
  Throughput t;
  t.samples = static_cast<int>(seconds.size());
  if (seconds.empty()) return t;
  const std::vector<double> one = {1.0};
  RatioInterval ci = bootstrap_ratio_ci(seconds, one, 0.95, 2000, 1);   // median(seconds) / 1
  t.median_s = ci.estimate;
  t.lo_s = ci.lo;
  t.hi_s = ci.hi;
  t.noise = relative_noise(seconds);
  const OpSpec* op = find_op(c.op());
  double flops = op->flops(c), bytes = op->bytes(c);
  t.gflops = flops / t.median_s / 1e9;
  t.gbs = bytes / t.median_s / 1e9;
  double mem_floor = m.stream_triad_gbs_all > 0 ? bytes / (m.stream_triad_gbs_all * 1e9) : 0;
  double flop_floor = m.f32_fma_gflops_all > 0 ? flops / (m.f32_fma_gflops_all * 1e9) : 0;
  t.floor_s = std::max(mem_floor, flop_floor);
  t.pct_of_limit = t.floor_s > 0 ? 100.0 * t.floor_s / t.median_s : 0;
  // The fastest honest call cannot beat the floor; compare the fastest sample, not the median.
  t.below_physical_bound = t.floor_s > 0 && *std::min_element(seconds.begin(), seconds.end()) < t.floor_s;
  return t;
}

SpeedRow measure_speed(const Candidate& base, const Candidate& patch, const Case& c, const Policy& p,
                       const MachineLimits& m) {
  BenchOptions bo;
  bo.max_time_s = p.max_time_s;
  bo.min_repetitions = 7;
  bo.stop = [&](const std::vector<std::vector<double>>& s, double elapsed) {
    if (s.size() < 2 || s[0].size() < 5 || s[1].size() < 5) return false;
    RatioInterval ci = bootstrap_ratio_ci(s[0], s[1], p.confidence, 500, 1);
    return should_stop(ci, p.target_halfwidth, elapsed, p.max_time_s, static_cast<int>(std::min(s[0].size(), s[1].size())), 7);
  };
  std::vector<BenchSamples> samples = time_candidates({&base, &patch}, c, bo);
  SpeedRow r;
  RatioInterval ci = bootstrap_ratio_ci(samples[0].seconds, samples[1].seconds, p.confidence, 2000, 1);
  r.estimate = ci.estimate;
  r.lo = ci.lo;
  r.hi = ci.hi;
  r.verdict = std::string(verdict_name(speed_verdict(ci, p.min_effect)));
  r.mann_whitney_p = mann_whitney_p(samples[0].seconds, samples[1].seconds);
  Throughput tb = throughput_of(samples[0].seconds, c, m), tp = throughput_of(samples[1].seconds, c, m);
  r.base_median_s = tb.median_s;
  r.patch_median_s = tp.median_s;
  r.noise_base = tb.noise;
  r.noise_patch = tp.noise;
  r.samples_base = tb.samples;
  r.samples_patch = tp.samples;
  r.gflops_patch = tp.gflops;
  r.gbs_patch = tp.gbs;
  r.pct_of_limit_patch = tp.pct_of_limit;
  r.below_physical_bound = tp.below_physical_bound;
  for (const BenchSamples& s : samples)
    if (!s.outputs_consistent) r.inconsistent += (r.inconsistent.empty() ? "" : "; ") + s.candidate + ": " + s.inconsistency;
  return r;
}

}  // namespace dg
