#include "harness/judge/gate.h"
#include "harness/core/json_limits.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/core/digest.h"
#include "harness/report/report.h"

namespace dg {
namespace {

const OutputResult* find_output(const Record& r, const std::string& name) {
  for (const OutputResult& o : r.outputs)
    if (o.name == name) return &o;
  return nullptr;
}

double metric(const TensorMetrics& m, const std::string& which) { return which == "rms" ? m.rms_ratio : m.max_abs; }

// floor_ulps ulps of the format: relative for rms (2^-(p-1) is one ulp at 1), absolute at the
// reference's largest magnitude for max_abs.
double floor_of(const std::string& which, const TensorMetrics& ref_scale, DType format, double floor_ulps) {
  if (which == "rms") return floor_ulps * std::ldexp(1.0, 1 - info(format).precision);
  return floor_ulps * ulp(format, ref_scale.ref_max_abs);
}


}  // namespace

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::MERGE: return "MERGE";
    case Verdict::REJECT: return "REJECT";
    case Verdict::CANNOT_JUDGE: return "CANNOT_JUDGE";
    case Verdict::INCOMPLETE: return "INCOMPLETE";
    case Verdict::SKIPPED: return "SKIPPED";
  }
  return "?";
}

Verdict verdict_from_name(std::string_view s) {
  for (Verdict v : {Verdict::MERGE, Verdict::REJECT, Verdict::CANNOT_JUDGE, Verdict::INCOMPLETE, Verdict::SKIPPED})
    if (verdict_name(v) == s) return v;
  throw std::invalid_argument(fmt::format("unknown verdict '{}'", s));
}

int verdict_exit_code(Verdict v) {
  switch (v) {
    case Verdict::MERGE: return 0;
    case Verdict::REJECT: return 1;
    case Verdict::CANNOT_JUDGE: return 4;
    case Verdict::INCOMPLETE: return 5;
    case Verdict::SKIPPED: return 4;   // never a whole gate's verdict; judged nothing
  }
  return 3;
}

std::string_view outcome_name(CheckOutcome o) {
  switch (o) {
    case CheckOutcome::judged: return "judged";
    case CheckOutcome::errored: return "errored";
    case CheckOutcome::skipped: return "skipped";
  }
  return "?";
}

namespace {

CheckOutcome outcome_from_name(std::string_view s) {
  for (CheckOutcome o : {CheckOutcome::judged, CheckOutcome::errored, CheckOutcome::skipped})
    if (outcome_name(o) == s) return o;
  throw std::invalid_argument(fmt::format("unknown check outcome '{}'", s));
}

}  // namespace

std::string GateRow::reasons() const {
  std::string s;
  for (const Check& c : checks)
    if (!c.passed) s += (s.empty() ? "" : "; ") + c.name + ": " + c.detail;
  return s;
}

namespace {

// A record's own floor: the one verify judged it against (the policy's min_bits of the narrowest of
// its formats, verify.h), or, for a record that carries none, the policy's min_bits of its outputs.
double own_floor(const Record& r, const Policy& pol) {
  if (r.min_bits > 0) return r.min_bits;
  double f = 0;
  for (const OutputResult& o : r.outputs) f = std::max(f, pol.min_bits_for(o.dtype));
  return f;
}

// The first output of a record below `floor` bits or with NaN/Inf where the reference has none; ""
// when there is none.
std::string below_floor(const Record& r, double floor) {
  for (const OutputResult& o : r.outputs) {
    if (o.metrics.nonfinite_mismatch > 0)
      return fmt::format("{}: {} NaN/Inf positions differ from the reference", o.name, o.metrics.nonfinite_mismatch);
    if (o.metrics.bits < floor) return fmt::format("{}: {:.1f} bits < its floor {:.0f}", o.name, o.metrics.bits, floor);
  }
  return {};
}

}  // namespace

VerifyOptions gate_verify_options(Tier tier, const Policy& policy, bool isolate, const std::vector<std::string>& worker_args,
                                  double wall_seconds, int64_t memory_bytes) {
  VerifyOptions vo;
  vo.tier = tier;
  vo.floor_policy = &policy;
  vo.isolate = isolate;
  vo.worker_runs = 2;
  vo.worker_args = worker_args;
  vo.wall_seconds = wall_seconds;
  vo.memory_bytes = memory_bytes;
  return vo;
}

namespace {
const OpMeasure* find_measure(const Record& r, const std::string& name) {
  for (const OpMeasure& m : r.measures)
    if (m.name == name) return &m;
  return nullptr;
}

double log2_margin(double value, double limit) {
  if (value > 0 && limit > 0) return std::log2(value / limit);
  return value <= limit ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
}

// The op's own measures (OpMeasure): an absolute limit as it stands, a relative one against the same
// measure of the base and the naive, as the tensor metrics. A NaN value fails either rule.
void measure_checks(const Record& base, const Record& patch, const Record* naive, const Policy& pol,
                    std::vector<Check>& out) {
  for (const OpMeasure& m : patch.measures) {
    if (!std::isnan(m.limit)) {
      Check k{"op." + m.name, m.value <= m.limit,
              fmt::format("{:.3g} vs limit {:.3g}: {}", m.value, m.limit, m.detail)};
      k.value = m.value;
      k.limit = m.limit;
      k.margin_bits = log2_margin(m.value, m.limit);
      out.push_back(k);
    }
    if (!m.relative) continue;
    const OpMeasure* b = find_measure(base, m.name);
    const OpMeasure* n = naive ? find_measure(*naive, m.name) : nullptr;
    if (!b) {
      out.push_back({"op." + m.name + ".relative", false, "the base has no measure " + m.name, CheckOutcome::errored});
      continue;
    }
    const double en = n ? n->value : 0.0;
    const double limit = std::max(b->value * (1 + pol.slack), pol.naive_factor * en) + m.floor;
    Check k{"op." + m.name + ".relative", m.value <= limit,
            fmt::format("patch {:.3g} vs limit {:.3g} = max(base {:.3g} x {:.2f}, {:.1f} x naive {}) + floor {:.2g}: {}",
                        m.value, limit, b->value, 1 + pol.slack, pol.naive_factor,
                        n ? fmt::format("{:.3g}", en) : "-", m.floor, m.detail)};
    k.value = m.value;
    k.limit = limit;
    k.base = b->value;
    if (n) k.naive = en;
    k.floor = m.floor;
    k.margin_bits = log2_margin(m.value, limit);
    out.push_back(k);
  }
}
}  // namespace

std::vector<Check> precision_checks(const Record& base, const Record& patch, const Record* naive, const Policy& pol) {
  std::vector<Check> out;
  // What the patch is judged against must itself be sound: a broken base or naive candidate makes
  // the case CANNOT_JUDGE (case_verdict), never a looser limit for the patch.
  if (base.disposition != Disposition::PASSED) {
    out.push_back({"base", false, fmt::format("the base is {} ({}): nothing to judge against",
                                              disposition_name(base.disposition), base.reason), CheckOutcome::errored});
    return out;
  }
  if (std::string why = below_floor(base, own_floor(base, pol)); !why.empty()) {
    out.push_back({"base", false, "the base fails its own floor (" + why + "): nothing to judge against",
                   CheckOutcome::errored});
    return out;
  }
  if (naive && naive->disposition != Disposition::PASSED) {
    out.push_back({"naive", false, fmt::format("the naive candidate {} is {} ({}): its error cannot set a limit",
                                               naive->candidate, disposition_name(naive->disposition), naive->reason),
                   CheckOutcome::errored});
    return out;
  }
  if (naive) {
    if (std::string why = below_floor(*naive, own_floor(*naive, pol)); !why.empty()) {
      out.push_back({"naive", false,
                     fmt::format("the naive candidate {} fails its own floor ({}): its error cannot set a limit",
                                 naive->candidate, why),
                     CheckOutcome::errored});
      return out;
    }
  }
  if (patch.disposition == Disposition::NOT_SUPPORTED) {
    bool skip = pol.not_supported == "skip";
    out.push_back({"patch", skip,
                   fmt::format("NOT_SUPPORTED: {} (policy cases.not_supported = \"{}\")", patch.reason, pol.not_supported),
                   skip ? CheckOutcome::skipped : CheckOutcome::judged});
    return out;
  }
  if (patch.disposition == Disposition::ERRORED || patch.disposition == Disposition::INVALID ||
      patch.disposition == Disposition::SKIPPED) {
    out.push_back({"patch", false, fmt::format("{}: {}", disposition_name(patch.disposition), patch.reason),
                   patch.disposition == Disposition::ERRORED ? CheckOutcome::errored : CheckOutcome::judged});
    return out;
  }
  const double patch_floor = own_floor(patch, pol);
  for (const OutputResult& b : base.outputs) {
    const OutputResult* p = find_output(patch, b.name);
    if (!p) {
      Check k{"output." + b.name, false, "the patch has no output " + b.name};
      k.margin_bits = std::numeric_limits<double>::infinity();
      out.push_back(k);
      continue;
    }
    const OutputResult* n = naive ? find_output(*naive, b.name) : nullptr;
    Check nf{"nonfinite." + b.name, p->metrics.nonfinite_mismatch == 0,
             p->metrics.nonfinite_mismatch == 0
                 ? "no NaN/Inf where the reference has none"
                 : fmt::format("{} NaN/Inf positions differ from the reference (first at flat index {})",
                               p->metrics.nonfinite_mismatch, p->metrics.first_mismatch)};
    nf.value = static_cast<double>(p->metrics.nonfinite_mismatch);
    nf.limit = 0;
    nf.margin_bits = nf.passed ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    out.push_back(nf);
    Check mb{"min_bits." + b.name, p->metrics.bits >= patch_floor,
             fmt::format("{:.1f} bits, minimum {:.0f} (the policy's min_bits of the patch's narrowest format)",
                         p->metrics.bits, patch_floor)};
    mb.value = p->metrics.bits;
    mb.limit = patch_floor;
    mb.margin_bits = patch_floor - p->metrics.bits;
    mb.base = b.metrics.bits;
    if (n) mb.naive = n->metrics.bits;
    out.push_back(mb);
    for (const std::string& m : pol.metrics) {
      double eb = metric(b.metrics, m), ep = metric(p->metrics, m);
      double en = n ? metric(n->metrics, m) : 0.0;
      double fl = floor_of(m, b.metrics, b.dtype, pol.floor_ulps);
      // The largest error of a case varies between seeds far more than its rms (two equally
      // accurate kernels' max_abs differ up to ~2x on one case: policies/default.toml), so max_abs
      // gets the tail factor on top; the rms rule carries the bulk of the judgement.
      const double tail = m == "max_abs" ? pol.tail_factor : 1.0;
      double limit = tail * std::max(eb * (1 + pol.slack), pol.naive_factor * en) + fl;
      Check k{fmt::format("precision.{}.{}", b.name, m), ep <= limit,
              fmt::format("patch {:.3g} vs limit {:.3g} = {}max(base {:.3g} x {:.2f}, {:.1f} x naive {}) + floor {:.2g}",
                          ep, limit, tail != 1.0 ? fmt::format("{:.1f} x ", tail) : "", eb, 1 + pol.slack,
                          pol.naive_factor, n ? fmt::format("{:.3g}", en) : "-", fl)};
      k.value = ep;
      k.limit = limit;
      k.base = eb;
      if (n) k.naive = en;
      k.floor = fl;
      k.margin_bits = ep > 0 && limit > 0 ? std::log2(ep / limit) : (ep <= limit ? -std::numeric_limits<double>::infinity()
                                                                                  : std::numeric_limits<double>::infinity());
      out.push_back(k);
    }
    if (b.drift && p->drift) {
      int64_t positions = b.drift->buckets.empty() ? 0 : b.drift->buckets.back().end;
      if (positions >= pol.drift_min_positions) {
        double gb = b.drift->growth_exponent, gp = p->drift->growth_exponent;
        Check k{"drift." + b.name, gp <= gb + pol.drift_margin,
                fmt::format("growth exponent {:.3f} vs base {:.3f} + margin {:.2f}", gp, gb, pol.drift_margin)};
        k.value = gp;
        k.limit = gb + pol.drift_margin;
        k.base = gb;
        if (n && n->drift) k.naive = n->drift->growth_exponent;
        out.push_back(k);
      }
    }
  }
  measure_checks(base, patch, naive, pol, out);
  return out;
}

Verdict case_verdict(const GateRow& row, const Policy& pol) {
  for (const Check& c : row.checks)
    if (!c.passed && (c.name == "base" || c.name == "naive")) return Verdict::CANNOT_JUDGE;
  if (row.patch.disposition == Disposition::NOT_SUPPORTED && pol.not_supported == "skip") return Verdict::SKIPPED;
  bool unsettled = false;
  for (const Check& c : row.checks)
    if (!c.passed && c.name == "timing_settled") unsettled = true;
    else if (!c.passed) return Verdict::REJECT;
  // (A patch that failed a check even beside a base it may have slowed, SLOWER among them, is
  // rejected above: the unsettled rule could only have flattered it.)
  return unsettled ? Verdict::CANNOT_JUDGE : Verdict::MERGE;
}

int GateReport::judged() const {
  int n = 0;
  for (const GateRow& g : rows) n += g.verdict == Verdict::MERGE || g.verdict == Verdict::REJECT;
  return n;
}

int GateReport::cannot_judge() const {
  int n = 0;
  for (const GateRow& g : rows) n += g.verdict == Verdict::CANNOT_JUDGE;
  return n;
}

int GateReport::skipped() const {
  int n = 0;
  for (const GateRow& g : rows) n += g.verdict == Verdict::SKIPPED;
  return n;
}

Verdict gate_verdict(const GateReport& r) {
  if (!r.complete()) return Verdict::INCOMPLETE;
  bool reject = false, cannot = false, merge = false, patch_never_measured = !r.rows.empty();
  for (const GateRow& g : r.rows) {
    reject |= g.verdict == Verdict::REJECT;
    cannot |= g.verdict == Verdict::CANNOT_JUDGE;
    merge |= g.verdict == Verdict::MERGE;
    if (g.patch.disposition != Disposition::ERRORED && g.patch.disposition != Disposition::NOT_SUPPORTED)
      patch_never_measured = false;
  }
  if (patch_never_measured) return Verdict::CANNOT_JUDGE;
  if (reject) return Verdict::REJECT;
  if (cannot || !merge) return Verdict::CANNOT_JUDGE;
  return Verdict::MERGE;
}

std::string verdict_text(const GateReport& r) {
  Verdict v = gate_verdict(r);
  std::string s(verdict_name(v));
  if (v == Verdict::INCOMPLETE && !r.missing_shards.empty()) {
    std::string missing;
    for (int i : r.missing_shards) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
    return fmt::format("{} ({} of {} cases; shards missing: {} of {})", s, r.rows.size(), r.planned.size(), missing,
                       r.shards.value("count", 0));
  }
  if (v == Verdict::INCOMPLETE) return fmt::format("{} ({} of {} cases)", s, r.rows.size(), r.planned.size());
  if (v == Verdict::MERGE && !r.timed) s += " (precision only)";
  // Cases the patch does not support were not judged: a MERGE says how many, so it is never read
  // as covering them.
  if (v == Verdict::MERGE && r.skipped() > 0)
    s += fmt::format(" ({} of {} cases not supported, skipped)", r.skipped(), r.planned.size());
  return s;
}

std::string rows_digest(const nlohmann::json& rows, const nlohmann::json& resume_key) {
  return sha256_hex("driftgate gate rows v1\n" + resume_key.dump() + "\n" + rows.dump());
}

std::vector<Check> speed_checks(const SpeedRow& s, std::optional<double> claim, const Policy& pol) {
  std::vector<Check> out;
  out.push_back({"physical_bound", !s.below_physical_bound,
                 s.below_physical_bound
                     ? std::string(s.patch_on_device ? "INVALID: faster than the device's memory bandwidth allows"
                                                     : "INVALID: faster than this machine's peak bandwidth/compute allows")
                     : fmt::format("{:.0f}% of the {}'s limit", s.pct_of_limit_patch, s.patch_on_device ? "device" : "machine")});
  out.push_back({"timed_outputs", s.inconsistent.empty(),
                 s.inconsistent.empty() ? "every timed call's outputs match an untimed re-run"
                                        : "INVALID: " + s.inconsistent});
  const std::string again = s.retimed.empty() ? "" : " (timed again in fresh workers: the first timing did not settle " + s.retimed + ")";
  out.push_back({"timing_rules", s.invalid.empty(),
                 (s.invalid.empty() ? "driftgate's clock and CPU reads agree with the worker's, within the thread budget"
                                    : "INVALID: " + s.invalid) + again});
  if (!s.unsettled.empty())
    out.push_back({"timing_settled", false,
                   "CANNOT_JUDGE: rule base_alone " + s.unsettled +
                       " (the machine was too noisy to tell whether the patch slowed the base; time it on a quieter one)",
                   CheckOutcome::errored});
  Check t{"throughput", s.verdict != "SLOWER",
          fmt::format("{} speedup {:.3f} [{:.3f}, {:.3f}], Mann-Whitney p {:.2g}", s.verdict, s.estimate, s.lo, s.hi,
                      s.mann_whitney_p)};
  t.value = s.estimate;
  out.push_back(t);
  if (claim) {
    Check k{"claim", s.lo >= *claim - pol.claim_tolerance,
            fmt::format("claimed {:.2f}x: interval's lower end {:.3f} vs {:.3f}", *claim, s.lo,
                        *claim - pol.claim_tolerance)};
    k.value = s.lo;
    k.limit = *claim - pol.claim_tolerance;
    out.push_back(k);
  }
  return out;
}

namespace {

nlohmann::json row_json(const GateRow& g) {
  nlohmann::json checks = nlohmann::json::array();
  auto num = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  for (const Check& c : g.checks) {
    nlohmann::json k = {{"name", c.name}, {"passed", c.passed}, {"detail", c.detail}, {"outcome", outcome_name(c.outcome)}};
    // The numbers, where the check has them (null: not finite or not a number of this check).
    if (!std::isnan(c.value) || !std::isnan(c.limit) || !std::isnan(c.margin_bits)) {
      k["value"] = num(c.value);
      k["limit"] = num(c.limit);
      k["margin_bits"] = std::isnan(c.margin_bits) ? nlohmann::json(nullptr)
                         : std::isinf(c.margin_bits) ? nlohmann::json(c.margin_bits > 0 ? "inf" : "-inf")
                                                     : nlohmann::json(c.margin_bits);
      k["base"] = num(c.base);
      k["naive"] = num(c.naive);
      k["floor"] = num(c.floor);
    }
    checks.push_back(std::move(k));
  }
  nlohmann::json row = {{"case", g.case_str}, {"verdict", verdict_name(g.verdict)}, {"checks", checks},
                        {"base", to_json(g.base)}, {"patch", to_json(g.patch)}, {"reproduce", g.reproduce},
                        {"reasons", g.reasons()}, {"seconds", g.seconds}};
  if (g.naive) row["naive"] = to_json(*g.naive);
  if (g.speed) {
    const SpeedRow& s = *g.speed;
    row["speed"] = {{"speedup", s.estimate}, {"lo", s.lo}, {"hi", s.hi}, {"verdict", s.verdict},
                    {"base_median_s", s.base_median_s}, {"patch_median_s", s.patch_median_s},
                    {"noise_base", s.noise_base}, {"noise_patch", s.noise_patch},
                    {"samples_base", s.samples_base}, {"samples_patch", s.samples_patch},
                    {"mann_whitney_p", s.mann_whitney_p}, {"gflops_patch", s.gflops_patch},
                    {"gbs_patch", s.gbs_patch}, {"pct_of_limit_patch", s.pct_of_limit_patch},
                    {"patch_on_device", s.patch_on_device}, {"patch_wall_median_s", s.patch_wall_median_s},
                    {"patch_host_overhead", s.patch_host_overhead}};
    if (s.base_alone_calls > 0)
      row["speed"]["base_alone"] = {{"ratio", s.base_alone}, {"lo", s.base_alone_lo}, {"hi", s.base_alone_hi},
                                    {"calls_alone", s.base_alone_calls}};
    if (!s.retimed.empty()) row["speed"]["retimed"] = s.retimed;
    if (!s.unsettled.empty()) row["speed"]["unsettled"] = s.unsettled;
    if (!s.machine.is_null()) row["speed"]["machine"] = s.machine;
    if (s.patch_on_device) {
      row["speed"]["patch_device"] = s.patch_device;
      row["speed"]["patch_peak_gbs"] = s.patch_peak_gbs;
      row["speed"]["patch_throttled"] = s.patch_throttled;
      row["speed"]["patch_low_clock"] = s.patch_low_clock;
    }
  } else {
    row["speed"] = nullptr;
  }
  return row;
}

nlohmann::json rows_json(const GateReport& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const GateRow& g : r.rows) rows.push_back(row_json(g));
  return rows;
}

}  // namespace

nlohmann::ordered_json gate_summary(const GateReport& r) {
  int merge = 0, reject = 0, cannot = 0, skipped = 0, faster = 0, same = 0, slower = 0, ambiguous = 0, timed = 0;
  double sum_log = 0, sum_var = 0, min_margin = std::numeric_limits<double>::infinity();
  for (const GateRow& g : r.rows) {
    merge += g.verdict == Verdict::MERGE;
    reject += g.verdict == Verdict::REJECT;
    cannot += g.verdict == Verdict::CANNOT_JUDGE;
    skipped += g.verdict == Verdict::SKIPPED;
    for (const Check& c : g.checks)
      if (c.passed && c.outcome == CheckOutcome::judged && std::isfinite(c.margin_bits))
        min_margin = std::min(min_margin, -c.margin_bits);
    if (!g.speed) continue;
    const SpeedRow& s = *g.speed;
    faster += s.verdict == "FASTER";
    same += s.verdict == "SAME";
    slower += s.verdict == "SLOWER";
    ambiguous += s.verdict == "AMBIGUOUS";
    if (s.estimate > 0 && s.lo > 0 && s.hi >= s.lo && std::isfinite(s.hi)) {
      ++timed;
      sum_log += std::log(s.estimate);
      const double se = (std::log(s.hi) - std::log(s.lo)) / (2 * 1.959964);
      sum_var += se * se;
    }
  }
  nlohmann::ordered_json j;
  j["rows"] = r.rows.size();
  j["merge"] = merge;
  j["reject"] = reject;
  j["cannot_judge"] = cannot;
  j["skipped"] = skipped;
  j["faster"] = faster;
  j["same"] = same;
  j["slower"] = slower;
  j["ambiguous"] = ambiguous;
  if (timed > 0) {
    const double mean = sum_log / timed, se = std::sqrt(sum_var) / timed;
    j["speedup_geomean"] = std::exp(mean);
    j["speedup_lo"] = std::exp(mean - 1.959964 * se);
    j["speedup_hi"] = std::exp(mean + 1.959964 * se);
  } else {
    j["speedup_geomean"] = nullptr;
    j["speedup_lo"] = nullptr;
    j["speedup_hi"] = nullptr;
  }
  j["speedup_cases"] = timed;
  j["min_margin_bits"] = std::isfinite(min_margin) ? nlohmann::ordered_json(min_margin) : nlohmann::ordered_json(nullptr);
  return j;
}

// verdict.json: the verdict and what it rests on first (a reader that stops after a few lines still
// reads whether the run is complete and timed), then the rows. Key order is fixed (ordered_json).
std::string gate_json(const GateReport& r) {
  nlohmann::json rows = rows_json(r);
  Verdict v = gate_verdict(r);
  nlohmann::ordered_json j;
  j["schema_version"] = kSchemaVersion;
  j["kind"] = "gate";
  j["verdict"] = verdict_name(v);
  j["verdict_text"] = verdict_text(r);
  j["exit_code"] = verdict_exit_code(v);
  j["complete"] = r.complete();
  j["timed"] = r.timed;
  j["suite"] = r.suite.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.suite);
  j["planned"] = r.planned.size();
  j["judged"] = r.judged();
  j["skipped"] = r.skipped();
  j["cannot_judge"] = r.cannot_judge();
  j["summary"] = gate_summary(r);
  j["run_id"] = r.run_id;
  j["rows_digest"] = rows_digest(rows, r.resume_key);
  j["started_at"] = r.started_at;
  j["finished_at"] = r.finished_at.empty() ? r.started_at : r.finished_at;
  j["seconds"] = r.seconds;
  j["base"] = r.base;
  j["patch"] = r.patch;
  j["policy"] = r.policy_source;
  // What produced the rows: this binary, the policy's contents (its canonical JSON in the resume
  // key), and every plugin library and exec program (harness/core/digest.h).
  const nlohmann::json policy_json = r.resume_key.contains("policy") ? r.resume_key.at("policy") : nlohmann::json();
  j["digests"] = {{"binary", r.resume_key.value("binary_sha256", self_exe_sha256())},
                  {"policy", sha256_hex(policy_json.dump())},
                  {"outside", nlohmann::ordered_json::parse(r.resume_key.value("outside", nlohmann::json::object()).dump())}};
  j["claim"] = r.claim ? nlohmann::ordered_json(*r.claim) : nlohmann::ordered_json(nullptr);
  j["baseline"] = nlohmann::ordered_json::parse(r.baseline.dump());
  j["cases"] = r.planned;
  j["coverage_gaps"] = r.coverage_gaps;
  j["resume_key"] = nlohmann::ordered_json::parse(r.resume_key.dump());
  if (!r.shard.is_null()) j["shard"] = nlohmann::ordered_json::parse(r.shard.dump());
  if (!r.shards.is_null()) j["shards"] = nlohmann::ordered_json::parse(r.shards.dump());
  j["context"] = nlohmann::ordered_json::parse(run_context(r.command).dump());
  j["rows"] = nlohmann::ordered_json::parse(rows.dump());
  return j.dump(2) + "\n";
}

std::vector<GateRow> gate_rows_from_json(const std::string& text) {
  nlohmann::json j = parse_json_bounded(text);   // a value nested deeper would overflow the stack when copied
  if (j.value("kind", "") != "gate") throw std::invalid_argument("not a gate verdict (kind is not \"gate\")");
  if (!j.contains("rows_digest") || !j.contains("resume_key"))
    throw std::invalid_argument("no rows_digest / resume_key (written by an older driftgate, or by hand)");
  if (rows_digest(j.at("rows"), j.at("resume_key")) != j.at("rows_digest").get<std::string>())
    throw std::invalid_argument("its rows do not match its rows_digest (edited after driftgate wrote them)");
  std::vector<GateRow> rows;
  for (const auto& r : j.at("rows")) {
    GateRow g;
    g.case_str = r.at("case");
    g.verdict = verdict_from_name(r.at("verdict").get<std::string>());
    g.reproduce = r.at("reproduce");
    g.seconds = r.value("seconds", 0.0);
    g.base = record_from_json(r.at("base"));
    g.patch = record_from_json(r.at("patch"));
    if (r.contains("naive")) g.naive = record_from_json(r.at("naive"));
    for (const auto& c : r.at("checks")) {
      Check k{c.at("name"), c.at("passed"), c.at("detail"), outcome_from_name(c.value("outcome", std::string("judged")))};
      auto read = [&](const char* key) {
        if (!c.contains(key) || c.at(key).is_null()) return std::numeric_limits<double>::quiet_NaN();
        if (c.at(key).is_string())
          return c.at(key).get<std::string>() == "inf" ? std::numeric_limits<double>::infinity()
                                                       : -std::numeric_limits<double>::infinity();
        return c.at(key).get<double>();
      };
      k.value = read("value");
      k.limit = read("limit");
      k.margin_bits = read("margin_bits");
      k.base = read("base");
      k.naive = read("naive");
      k.floor = read("floor");
      g.checks.push_back(std::move(k));
    }
    if (!r.at("speed").is_null()) {
      const auto& s = r.at("speed");
      SpeedRow sp;
      sp.estimate = s.at("speedup");
      sp.lo = s.at("lo");
      sp.hi = s.at("hi");
      sp.verdict = s.at("verdict");
      sp.base_median_s = s.at("base_median_s");
      sp.patch_median_s = s.at("patch_median_s");
      sp.noise_base = s.at("noise_base");
      sp.noise_patch = s.at("noise_patch");
      sp.samples_base = json_integer<int>(s.at("samples_base"));
      sp.samples_patch = json_integer<int>(s.at("samples_patch"));
      sp.mann_whitney_p = s.at("mann_whitney_p");
      sp.gflops_patch = s.at("gflops_patch");
      sp.gbs_patch = s.at("gbs_patch");
      sp.pct_of_limit_patch = s.at("pct_of_limit_patch");
      sp.patch_on_device = s.value("patch_on_device", false);
      sp.patch_wall_median_s = s.value("patch_wall_median_s", 0.0);
      sp.patch_host_overhead = s.value("patch_host_overhead", 0.0);
      sp.patch_device = s.value("patch_device", std::string());
      sp.patch_peak_gbs = s.value("patch_peak_gbs", 0.0);
      sp.patch_throttled = s.contains("patch_throttled") ? json_integer<int>(s.at("patch_throttled")) : 0;
      sp.patch_low_clock = s.contains("patch_low_clock") ? json_integer<int>(s.at("patch_low_clock")) : 0;
      sp.retimed = s.value("retimed", std::string());
      sp.unsettled = s.value("unsettled", std::string());
      if (s.contains("machine")) sp.machine = s.at("machine");
      if (s.contains("base_alone")) {
        const nlohmann::json& a = s.at("base_alone");
        sp.base_alone = a.at("ratio");
        sp.base_alone_lo = a.at("lo");
        sp.base_alone_hi = a.at("hi");
        sp.base_alone_calls = json_integer<int>(a.at("calls_alone"));
      }
      g.speed = sp;
    }
    rows.push_back(std::move(g));
  }
  return rows;
}

namespace {

// verdict.md's line on a shard, or on the shards a merged gate came from and the machines they
// timed on (the speed of each row is measured on one machine; several machines are said, not mixed).
std::string shard_markdown(const GateReport& r) {
  std::string s;
  if (r.shard.is_object())
    s += fmt::format("Shard {}/{} of the run: its {} of the run's {} cases, on `{}`; `driftgate merge` combines the "
                     "shards' verdict.json files.\n\n",
                     r.shard.value("index", 0), r.shard.value("count", 0), r.planned.size(),
                     r.resume_key.value("cases", nlohmann::json::array()).size(),
                     r.shard.value("machine", nlohmann::json::object()).value("hostname", "?"));
  if (!r.shards.is_object()) return s;
  std::string missing;
  for (int i : r.missing_shards) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
  s += fmt::format("Merged from {} of {} shards{}.\n\n", r.shards.value("merged", nlohmann::json::array()).size(),
                   r.shards.value("count", 0), missing.empty() ? "" : "; MISSING: shard " + missing);
  const nlohmann::json machines = r.shards.value("machines", nlohmann::json::array());
  if (machines.size() > 1) {
    s += fmt::format("The shards ran on {} machines; each row's speed compares base and patch timed together on one of "
                     "them (speed.machine in verdict.json), and speedups of different machines sit side by side:",
                     machines.size());
    for (const auto& m : machines)
      s += fmt::format(" `{}` ({}, {} cores; shards {})", m["machine"].value("hostname", "?"), m["machine"].value("cpu", "?"),
                       m["machine"].value("cores", 0), m["shards"].dump());
    s += ".\n\n";
  }
  return s;
}

}  // namespace

std::string gate_markdown(const GateReport& r) {
  nlohmann::json rows = rows_json(r);
  std::string s = fmt::format("# driftgate gate: {}\n\nbase `{}`, patch `{}`, policy `{}`{}\n\n", verdict_text(r), r.base,
                              r.patch, r.policy_source, r.claim ? fmt::format(", claimed speedup {:.2f}x", *r.claim) : "");
  if (r.baseline.is_object())
    s += fmt::format("The base's rows are stored: `{}` (run `{}`, commit `{}`, sha256 `{}`); its kernel did not run, "
                     "nothing was timed.\n\n",
                     r.baseline.value("path", ""), r.baseline.value("run_id", ""),
                     r.baseline.value("context", nlohmann::json::object()).value("git_commit", ""), r.baseline.value("sha256", ""));
  s += fmt::format("{} of {} cases judged, {} skipped, {} could not be judged{}{}; run `{}`, rows digest `{}`\n\n",
                   r.judged(), r.planned.size(), r.skipped(), r.cannot_judge(), r.complete() ? "" : ": INCOMPLETE, the gate stopped before the other cases",
                   r.timed ? "" : "; throughput not timed (--no-time)", r.run_id, rows_digest(rows, r.resume_key));
  s += shard_markdown(r);
  if (!r.coverage_gaps.empty()) {
    std::string gaps;
    for (const std::string& g : r.coverage_gaps) gaps += (gaps.empty() ? "`" : ", `") + g + "`";
    s += fmt::format("Not exercised by these cases (a bug there would pass): {}\n\n", gaps);
  }
  s += "| case | base bits | patch bits | delta bits | max ULP at rms | drift exp (base/patch) | speedup [interval] | verdict |\n";
  s += "|---|---|---|---|---|---|---|---|\n";
  for (const GateRow& g : r.rows) {
    const OutputResult* bo = primary_output(g.base);
    const OutputResult* po = primary_output(g.patch);
    std::string bb = bo ? fmt::format("{:.1f}", bo->metrics.bits) : "-";
    std::string pb = po ? fmt::format("{:.1f}", po->metrics.bits) : "-";
    std::string db = bo && po ? fmt::format("{:+.1f}", po->metrics.bits - bo->metrics.bits + 0.0) : "-";
    std::string ulp_s = po ? fmt::format("{:.3g}", po->metrics.ulp_rms_max) : "-";
    std::string drift = bo && po && bo->drift && po->drift
                            ? fmt::format("{:.2f} / {:.2f}", bo->drift->growth_exponent, po->drift->growth_exponent)
                            : "-";
    // No speedup is shown for a patch that did not pass precision.
    std::string speed = g.speed ? fmt::format("{:.3f} [{:.3f}, {:.3f}] {}", g.speed->estimate, g.speed->lo, g.speed->hi,
                                              g.speed->verdict)
                                : "not timed";
    s += fmt::format("| `{}` | {} | {} | {} | {} | {} | {} | **{}** |\n", g.case_str, bb, pb, db, ulp_s, drift, speed,
                     verdict_name(g.verdict));
  }
  for (size_t i = r.rows.size(); i < r.planned.size(); ++i)
    s += fmt::format("| `{}` | - | - | - | - | - | - | **not judged yet** |\n", r.planned[i]);
  bool any = false;
  for (const GateRow& g : r.rows) {
    if (g.verdict == Verdict::MERGE) continue;
    if (!any) s += "\n## Why\n\n";
    any = true;
    s += fmt::format("- `{}` ({}): {}\n  - reproduce: `{}`\n", g.case_str, verdict_name(g.verdict), g.reasons(), g.reproduce);
  }
  return s;
}

// JUnit XML in the structure of the Jenkins xUnit plugin's junit-10.xsd (tests/junit/junit-10.xsd):
// testsuites > testsuite (name, tests, failures, errors, skipped, time, timestamp) > properties,
// testcase (classname, name, time) with <skipped>, <error> or <failure>. One testcase per case and
// check (a case's wall time on its first check), one "not judged yet" per planned case without a
// row, and one for the gate's verdict: a failure on REJECT, an error on CANNOT_JUDGE or INCOMPLETE.
std::string gate_junit(const GateReport& r) {
  int tests = 0, failures = 0, errors = 0, skipped = 0;
  std::string body;
  auto testcase = [&](const std::string& classname, const std::string& name, double seconds, const std::string& inner) {
    ++tests;
    body += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\">{}</testcase>\n", xml_escape(classname),
                        xml_escape(name), seconds, inner);
  };
  for (const GateRow& g : r.rows) {
    bool first = true;
    for (const Check& c : g.checks) {
      std::string inner;
      if (c.outcome == CheckOutcome::skipped) {
        ++skipped;
        inner = fmt::format("<skipped message=\"{}\"/>", xml_escape(c.detail));
      } else if (c.outcome == CheckOutcome::errored && !c.passed) {
        ++errors;
        inner = fmt::format("<error message=\"{}\">{}</error>", xml_escape(c.detail), xml_escape("reproduce: " + g.reproduce));
      } else if (!c.passed) {
        ++failures;
        inner = fmt::format("<failure message=\"{}\">{}</failure>", xml_escape(c.detail),
                            xml_escape("reproduce: " + g.reproduce));
      }
      testcase(g.case_str, c.name, first ? g.seconds : 0.0, inner);
      first = false;
    }
  }
  for (size_t i = r.rows.size(); i < r.planned.size(); ++i) {
    ++skipped;
    testcase(r.planned[i], "not_judged", 0.0, "<skipped message=\"not judged yet: the gate stopped before this case\"/>");
  }
  Verdict v = gate_verdict(r);
  std::string inner;
  std::string what = fmt::format("{}: {} of {} cases judged, {} skipped, {} could not be judged", verdict_text(r),
                                 r.judged(), r.planned.size(), r.skipped(), r.cannot_judge());
  if (v == Verdict::REJECT) {
    ++failures;
    inner = fmt::format("<failure message=\"{}\"/>", xml_escape(what));
  } else if (v != Verdict::MERGE) {
    ++errors;
    inner = fmt::format("<error message=\"{}\"/>", xml_escape(what));
  }
  testcase("driftgate.gate", "verdict", r.seconds, inner);
  std::string props = fmt::format(
      "    <properties>\n      <property name=\"verdict\" value=\"{}\"/>\n      <property name=\"complete\" value=\"{}\"/>\n"
      "      <property name=\"timed\" value=\"{}\"/>\n      <property name=\"run_id\" value=\"{}\"/>\n"
      "      <property name=\"rows_digest\" value=\"{}\"/>\n    </properties>\n",
      verdict_name(v), r.complete() ? "true" : "false", r.timed ? "true" : "false", xml_escape(r.run_id),
      rows_digest(rows_json(r), r.resume_key));
  std::string name = xml_escape(fmt::format("driftgate gate {} vs {}", r.patch, r.base));
  // junit-10.xsd: <testsuites> has no skipped attribute; <testsuite> has.
  std::string counts = fmt::format("tests=\"{}\" failures=\"{}\" errors=\"{}\"", tests, failures, errors);
  return fmt::format("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"{0}\" {1} time=\"{5:.3f}\">\n"
                     "  <testsuite name=\"{0}\" {1} skipped=\"{6}\" time=\"{5:.3f}\" timestamp=\"{2}\">\n{3}{4}"
                     "  </testsuite>\n</testsuites>\n",
                     name, counts, xml_escape(r.started_at), props, body, r.seconds, skipped);
}

}  // namespace dg
