#include "harness/timing/speed.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/metrics/stats.h"
#include "harness/timing/timing_worker.h"

namespace dg {

Throughput throughput_of(const std::vector<double>& seconds, const Case& c, const MachineLimits& m, const Storage& storage) {
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
  double flops = op->flops(c), bytes = op->bytes(c, storage);
  t.gflops = flops / t.median_s / 1e9;
  t.gbs = bytes / t.median_s / 1e9;
  double mem_floor = m.stream_triad_gbs_all > 0 ? bytes / (m.stream_triad_gbs_all * 1e9) : 0;
  // Narrow inputs can go faster than f32 FMAs (bf16 dot products, AMX tiles: compute_peak_factor),
  // whether the candidate reads them narrow or the case stores them so (exact in any wider format).
  const DType narrowest = info(c.dtype()).storage_bytes < info(storage.input).storage_bytes ? c.dtype() : storage.input;
  double flop_floor =
      m.f32_fma_gflops_all > 0 ? flops / (m.f32_fma_gflops_all * 1e9 * compute_peak_factor(narrowest)) : 0;
  t.floor_s = std::max(mem_floor, flop_floor);
  t.pct_of_limit = t.floor_s > 0 ? 100.0 * t.floor_s / t.median_s : 0;
  // The fastest honest call cannot beat the floor; compare the fastest sample, not the median.
  t.below_physical_bound = t.floor_s > 0 && *std::min_element(seconds.begin(), seconds.end()) < t.floor_s;
  return t;
}

Throughput throughput_of(const BenchSamples& s, const Case& c, const MachineLimits& m) {
  const Candidate* cand = find_candidate(s.candidate);
  const Storage state = cand ? cand->info().storage() : Storage{};
  if (s.wall_seconds.empty()) return throughput_of(s.seconds, c, m, state);
  // The device's bound replaces this machine's: memory bandwidth only (KDA and the decode steps are
  // bandwidth-bound; the device's FMA peak is not measured here).
  MachineLimits dev;
  dev.stream_triad_gbs_all = s.device_peak_gbs;
  Throughput t = throughput_of(s.seconds, c, dev, state);
  t.device = true;
  t.peak_gbs = s.device_peak_gbs;
  std::vector<double> w = s.wall_seconds;
  std::nth_element(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(w.size() / 2), w.end());
  t.wall_median_s = w[w.size() / 2];
  t.host_overhead = t.wall_median_s > 0 ? 1.0 - t.median_s / t.wall_median_s : 0;
  return t;
}

bool base_alone_settled(const BenchSamples& base) {
  return base.alone_calls == 0 ||
         (base.alone_ratio >= kBaseAloneHiddenBelow && base.alone_ratio <= 1 + kBaseAloneTolerance);
}

namespace {

// A retime clears a first timing that read the base slower beside the patch than alone beyond the
// tolerance only when its interval lies wholly below the first one: evidence that the first was
// noise, not a second draw that missed (a 1.3x cheat read 1.28x [1.27, 1.31], then 1.04x [0.86,
// 1.31] at its retime, and MERGEd).
bool clears(const BenchSamples& first, const BenchSamples& again) {
  return !(first.alone_calls > 0 && first.alone_lo > 1 + kBaseAloneTolerance) || again.alone_hi < first.alone_lo;
}

std::string unsettled_text(const std::string& base, const BenchSamples& s) {
  return fmt::format("{} beside the patch at {:.2f}x [{:.2f}, {:.2f}] of its time alone, outside [{:.2f}, {:.2f}]", base,
                     s.alone_ratio, s.alone_lo, s.alone_hi, kBaseAloneHiddenBelow, 1 + kBaseAloneTolerance);
}

// Rule base_alone compares two processes, and on a loaded machine one process can run a short
// kernel slower than another for its whole life (1 honest run in 8 at T=64, 40-130 us calls, read
// the base 1.9x slower beside the patch than alone; under load either worker ran 2x slow for a
// whole timing, though part of that was an alone worker that stopped after 200 rounds of a longer
// comparison: timing_worker.cpp alone_worker_args). A case whose first timing broke only this rule, or did not settle it
// (base_alone_settled: a 1.3x cheat read 0.45x there, its slowdown hidden by a slow alone worker,
// and MERGEd), is timed again in fresh workers, at most kBaseAloneRetimes times, and the first
// retime that settles it, or breaks a rule, is the row. When no retime settles it: a first timing
// that broke the rule stands (INVALID); one that only did not settle it leaves the case
// CANNOT_JUDGE (speed.unsettled): the machine was too noisy to tell.
SpeedRow settle_base_alone(const TimingRequest& req, const Case& c, const Policy& p, const MachineLimits& m,
                           const std::vector<BenchSamples>& first, SpeedRow r) {
  const bool broken = !first[0].alone_invalid.empty() && r.invalid == first[0].alone_invalid;
  // (Unsettled but SLOWER: slower even beside a base it may have slowed, rejected as it is.)
  if (!broken && (!r.invalid.empty() || base_alone_settled(first[0]) || r.verdict == "SLOWER")) return r;
  const std::string& base = req.candidates[0];
  const std::string why = broken ? first[0].alone_invalid : "rule base_alone: " + unsettled_text(base, first[0]);
  std::vector<std::string> unsettled;
  for (int retime = 1; retime <= kBaseAloneRetimes; ++retime) {
    const std::vector<BenchSamples> again = time_in_worker(req);
    SpeedRow next = speed_row(again, c, p, m);
    next.retimed = why;
    if (!unsettled.empty()) next.retimed += fmt::format("; then {}", fmt::join(unsettled, "; then "));
    if (!next.invalid.empty() || (base_alone_settled(again[0]) && clears(first[0], again[0])) ||
        (!broken && next.verdict == "SLOWER"))
      return next;
    unsettled.push_back(base_alone_settled(again[0])
                            ? fmt::format("{} beside the patch at {:.2f}x [{:.2f}, {:.2f}] of its time alone, not clear of the "
                                          "first timing's lower end {:.2f}",
                                          base, again[0].alone_ratio, again[0].alone_lo, again[0].alone_hi, first[0].alone_lo)
                            : unsettled_text(base, again[0]));
    r = next;
  }
  const std::string story = fmt::format("not settled in {} timings in fresh workers: the first: {}; then {}",
                                        kBaseAloneRetimes + 1, why, fmt::join(unsettled, "; then "));
  if (broken) r.invalid = "rule base_alone: " + story;
  else r.unsettled = story;
  return r;
}

}  // namespace

SpeedRow measure_speed(const Candidate& base, const Candidate& patch, const Case& c, const Policy& p,
                       const MachineLimits& m, const std::vector<std::string>& extra_args,
                       const std::vector<std::string>& base_args, double wall_seconds) {
  TimingRequest req;
  req.candidates = {base.name(), patch.name()};
  req.case_str = c.str();
  req.max_time_s = p.max_time_s;
  req.confidence = p.confidence;
  req.target_halfwidth = p.target_halfwidth;
  req.interim_confidence = p.interim_confidence;
  req.min_effect = p.min_effect;
  req.extra_args = extra_args;
  req.wall_seconds = wall_seconds;
  req.base_alone = true;
  req.base_args = base_args;
  const std::vector<BenchSamples> first = time_in_worker(req);
  SpeedRow r = speed_row(first, c, p, m);
  return settle_base_alone(req, c, p, m, first, r);
}

SpeedRow speed_row(const std::vector<BenchSamples>& samples, const Case& c, const Policy& p, const MachineLimits& m) {
  SpeedRow r;
  RatioInterval ci = bootstrap_ratio_ci(samples[0].seconds, samples[1].seconds, p.confidence, 2000, 1);
  r.estimate = ci.estimate;
  r.lo = ci.lo;
  r.hi = ci.hi;
  r.mann_whitney_p = mann_whitney_p(samples[0].seconds, samples[1].seconds);
  r.verdict = std::string(verdict_name(rank_checked(speed_verdict(ci, p.min_effect), r.mann_whitney_p, p.confidence)));
  Throughput tb = throughput_of(samples[0], c, m), tp = throughput_of(samples[1], c, m);
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
  r.patch_on_device = tp.device;
  r.patch_wall_median_s = tp.wall_median_s;
  r.patch_host_overhead = tp.host_overhead;
  r.patch_device = samples[1].device;
  r.patch_peak_gbs = tp.peak_gbs;
  r.patch_throttled = samples[1].throttled;
  r.patch_low_clock = samples[1].low_clock;
  r.base_alone = samples[0].alone_ratio;
  r.base_alone_lo = samples[0].alone_lo;
  r.base_alone_hi = samples[0].alone_hi;
  r.base_alone_calls = samples[0].alone_calls;
  for (const BenchSamples& s : samples)   // (a rule that voids every candidate's samples is said once)
    if (!s.invalid.empty() && r.invalid.find(s.invalid) == std::string::npos)
      r.invalid += (r.invalid.empty() ? "" : "; ") + s.invalid;
  for (const BenchSamples& s : samples)
    if (!s.outputs_consistent) r.inconsistent += (r.inconsistent.empty() ? "" : "; ") + s.candidate + ": " + s.inconsistency;
  return r;
}

}  // namespace dg
