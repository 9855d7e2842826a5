#include "harness/timing/speed.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>

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

// The alone worker's calls span the rounds of the base's calls beside the patch (one a round; an
// alone worker that ended early compared the base over two different windows).
bool alone_spans_the_rounds(const BenchSamples& base) {
  return base.alone_calls + 1 >= static_cast<int>(base.seconds.size());
}

bool base_alone_settled(const BenchSamples& base) {
  return base.alone_calls == 0 || (alone_spans_the_rounds(base) && base.alone_ratio >= kBaseAloneHiddenBelow &&
                                   base.alone_ratio <= 1 + kBaseAloneTolerance);
}

namespace {

// A timing that broke rule base_alone and no other (another rule's finding is the row as it is).
bool breaks_only_base_alone(const SpeedRow& r, const BenchSamples& base) {
  return !base.alone_invalid.empty() && r.invalid == base.alone_invalid;
}

std::string unsettled_text(const std::string& base, const BenchSamples& s) {
  if (!alone_spans_the_rounds(s))
    return fmt::format("{} was timed alone in {} of the {} rounds it was timed beside the patch", base, s.alone_calls,
                       s.seconds.size());
  return fmt::format("{} beside the patch at {:.2f}x [{:.2f}, {:.2f}] of its time alone, outside [{:.2f}, {:.2f}]", base,
                     s.alone_ratio, s.alone_lo, s.alone_hi, kBaseAloneHiddenBelow, 1 + kBaseAloneTolerance);
}

}  // namespace

// Rule base_alone compares two processes, and on a loaded machine one process can run a short
// kernel slower than another for its whole life (1 honest run in 8 at T=64, 40-130 us calls, read
// the base 1.9x slower beside the patch than alone; under load either worker ran 2x slow for a
// whole timing, though part of that was an alone worker that stopped after 200 rounds of a longer
// comparison: timing_worker.cpp alone_worker_args). A case whose timing broke only this rule, or
// did not settle it (base_alone_settled: a 1.3x cheat read 0.45x there, its slowdown hidden by a
// slow alone worker, and MERGEd), is timed again in fresh workers, at most kBaseAloneRetimes times.
// The row is the first retime that settles the rule and reads wholly below every timing that read
// the base slower beside the patch than alone (its interval's upper end under their lower ends:
// evidence that they were noise, not a second draw that missed; a 1.3x cheat read 1.28x [1.27,
// 1.31], then 1.04x [0.86, 1.31], and MERGEd), or that breaks another rule. A retime that breaks
// this rule again is timed again too (an honest pair of 7-call timings under a CI run beside
// another test run read 1.43x [0.83, 1.83], then 1.35x [1.29, 1.42], and was INVALID at once).
// Never settled: INVALID when any timing broke the rule; CANNOT_JUDGE (speed.unsettled) when none
// did: the machine was too noisy to tell. (Unsettled but SLOWER, and nothing broke: slower even
// beside a base it may have slowed, rejected as it is.)
SpeedRow settle_base_alone(const std::string& base, const std::vector<BenchSamples>& first, SpeedRow r,
                           const std::function<Timing()>& time_again) {
  bool broken = breaks_only_base_alone(r, first[0]);
  if (!broken && (!r.invalid.empty() || base_alone_settled(first[0]) || r.verdict == "SLOWER")) return r;
  double lowest_break = std::numeric_limits<double>::infinity();   // of the timings that read the base slower beside
  auto note_break = [&](const BenchSamples& b) {
    if (b.alone_calls > 0 && b.alone_lo > 1 + kBaseAloneTolerance) lowest_break = std::min(lowest_break, b.alone_lo);
  };
  note_break(first[0]);
  std::vector<std::string> readings = {broken ? first[0].alone_invalid : "rule base_alone: " + unsettled_text(base, first[0])};
  for (int retime = 1; retime <= kBaseAloneRetimes; ++retime) {
    auto [again, next] = time_again();
    next.retimed = fmt::format("{}", fmt::join(readings, "; then "));
    const bool next_broken = breaks_only_base_alone(next, again[0]);
    if ((!next.invalid.empty() && !next_broken) ||
        (!next_broken && base_alone_settled(again[0]) && again[0].alone_hi < lowest_break) ||
        (!next_broken && !broken && next.verdict == "SLOWER"))
      return next;
    broken = broken || next_broken;
    readings.push_back(next_broken ? again[0].alone_invalid
                       : base_alone_settled(again[0])
                           ? fmt::format("{} beside the patch at {:.2f}x [{:.2f}, {:.2f}] of its time alone, not clear of "
                                         "the lower end {:.2f} of a timing that read it slower beside the patch",
                                         base, again[0].alone_ratio, again[0].alone_lo, again[0].alone_hi, lowest_break)
                           : unsettled_text(base, again[0]));
    note_break(again[0]);
    r = next;
  }
  const std::string story = fmt::format("not settled in {} timings in fresh workers: the first: {}", kBaseAloneRetimes + 1,
                                        fmt::join(readings, "; then "));
  if (broken) r.invalid = "rule base_alone: " + story;
  else r.unsettled = story;
  return r;
}

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
  return settle_base_alone(req.candidates[0], first, r, [&] {
    std::vector<BenchSamples> again = time_in_worker(req);
    SpeedRow row = speed_row(again, c, p, m);
    return Timing{std::move(again), std::move(row)};
  });
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
