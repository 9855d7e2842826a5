#include "harness/gate.h"
#include "harness/json_limits.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/report.h"

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

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += ch;
    }
  }
  return o;
}

}  // namespace

std::string_view verdict_name(Verdict v) { return v == Verdict::MERGE ? "MERGE" : "REJECT"; }

std::string GateRow::reasons() const {
  std::string s;
  for (const Check& c : checks)
    if (!c.passed) s += (s.empty() ? "" : "; ") + c.name + ": " + c.detail;
  return s;
}

std::vector<Check> precision_checks(const Record& base, const Record& patch, const Record* naive, const Policy& pol) {
  std::vector<Check> out;
  if (base.disposition != Disposition::PASSED) {
    out.push_back({"base", false, fmt::format("the base is {} ({}): nothing to judge against",
                                              disposition_name(base.disposition), base.reason)});
    return out;
  }
  if (patch.disposition == Disposition::ERRORED || patch.disposition == Disposition::INVALID ||
      patch.disposition == Disposition::NOT_SUPPORTED || patch.disposition == Disposition::SKIPPED) {
    out.push_back({"patch", false, fmt::format("{}: {}", disposition_name(patch.disposition), patch.reason)});
    return out;
  }
  for (const OutputResult& b : base.outputs) {
    const OutputResult* p = find_output(patch, b.name);
    if (!p) {
      out.push_back({"output." + b.name, false, "the patch has no output " + b.name});
      continue;
    }
    const OutputResult* n = naive ? find_output(*naive, b.name) : nullptr;
    out.push_back({"nonfinite." + b.name, p->metrics.nonfinite_mismatch == 0,
                   p->metrics.nonfinite_mismatch == 0
                       ? "no NaN/Inf where the reference has none"
                       : fmt::format("{} NaN/Inf positions differ from the reference (first at flat index {})",
                                     p->metrics.nonfinite_mismatch, p->metrics.first_mismatch)});
    double min_bits = pol.min_bits_for(p->dtype);
    out.push_back({"min_bits." + b.name, p->metrics.bits >= min_bits,
                   fmt::format("{:.1f} bits, minimum {:.0f} for {}", p->metrics.bits, min_bits, name(p->dtype))});
    for (const std::string& m : pol.metrics) {
      double eb = metric(b.metrics, m), ep = metric(p->metrics, m);
      double en = n ? metric(n->metrics, m) : 0.0;
      double fl = floor_of(m, b.metrics, b.dtype, pol.floor_ulps);
      double limit = std::max(eb * (1 + pol.slack), pol.naive_factor * en) + fl;
      out.push_back({fmt::format("precision.{}.{}", b.name, m), ep <= limit,
                     fmt::format("patch {:.3g} vs limit {:.3g} = max(base {:.3g} x {:.2f}, {:.1f} x naive {}) + floor {:.2g}",
                                 ep, limit, eb, 1 + pol.slack, pol.naive_factor, n ? fmt::format("{:.3g}", en) : "-", fl)});
    }
    if (b.drift && p->drift) {
      int64_t positions = b.drift->buckets.empty() ? 0 : b.drift->buckets.back().end;
      if (positions >= pol.drift_min_positions) {
        double gb = b.drift->growth_exponent, gp = p->drift->growth_exponent;
        out.push_back({"drift." + b.name, gp <= gb + pol.drift_margin,
                       fmt::format("growth exponent {:.3f} vs base {:.3f} + margin {:.2f}", gp, gb, pol.drift_margin)});
      }
    }
  }
  return out;
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
  out.push_back({"throughput", s.verdict != "SLOWER",
                 fmt::format("{} speedup {:.3f} [{:.3f}, {:.3f}]", s.verdict, s.estimate, s.lo, s.hi)});
  if (claim)
    out.push_back({"claim", s.lo >= *claim - pol.claim_tolerance,
                   fmt::format("claimed {:.2f}x: interval's lower end {:.3f} vs {:.3f}", *claim, s.lo,
                               *claim - pol.claim_tolerance)});
  return out;
}

std::string gate_json(const GateReport& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const GateRow& g : r.rows) {
    nlohmann::json checks = nlohmann::json::array();
    for (const Check& c : g.checks) checks.push_back({{"name", c.name}, {"passed", c.passed}, {"detail", c.detail}});
    nlohmann::json row = {{"case", g.case_str}, {"verdict", verdict_name(g.verdict)}, {"checks", checks},
                          {"base", to_json(g.base)}, {"patch", to_json(g.patch)}, {"reproduce", g.reproduce},
                          {"reasons", g.reasons()}};
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
      if (s.patch_on_device) {
        row["speed"]["patch_device"] = s.patch_device;
        row["speed"]["patch_peak_gbs"] = s.patch_peak_gbs;
        row["speed"]["patch_throttled"] = s.patch_throttled;
        row["speed"]["patch_low_clock"] = s.patch_low_clock;
      }
    } else {
      row["speed"] = nullptr;
    }
    rows.push_back(row);
  }
  nlohmann::json j = {{"schema_version", kSchemaVersion}, {"kind", "gate"}, {"context", run_context(r.command)},
                      {"base", r.base}, {"patch", r.patch}, {"policy", r.policy_source},
                      {"claim", r.claim ? nlohmann::json(*r.claim) : nlohmann::json(nullptr)},
                      {"verdict", verdict_name(r.verdict)}, {"rows", rows}};
  return j.dump(2) + "\n";
}

std::vector<GateRow> gate_rows_from_json(const std::string& text) {
  nlohmann::json j = parse_json_bounded(text);   // a value nested deeper would overflow the stack when copied
  std::vector<GateRow> rows;
  for (const auto& r : j.at("rows")) {
    GateRow g;
    g.case_str = r.at("case");
    g.verdict = r.at("verdict") == "MERGE" ? Verdict::MERGE : Verdict::REJECT;
    g.reproduce = r.at("reproduce");
    g.base = record_from_json(r.at("base"));
    g.patch = record_from_json(r.at("patch"));
    if (r.contains("naive")) g.naive = record_from_json(r.at("naive"));
    for (const auto& c : r.at("checks")) g.checks.push_back({c.at("name"), c.at("passed"), c.at("detail")});
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
      sp.samples_base = s.at("samples_base");
      sp.samples_patch = s.at("samples_patch");
      sp.mann_whitney_p = s.at("mann_whitney_p");
      sp.gflops_patch = s.at("gflops_patch");
      sp.gbs_patch = s.at("gbs_patch");
      sp.pct_of_limit_patch = s.at("pct_of_limit_patch");
      sp.patch_on_device = s.value("patch_on_device", false);
      sp.patch_wall_median_s = s.value("patch_wall_median_s", 0.0);
      sp.patch_host_overhead = s.value("patch_host_overhead", 0.0);
      sp.patch_device = s.value("patch_device", std::string());
      sp.patch_peak_gbs = s.value("patch_peak_gbs", 0.0);
      sp.patch_throttled = s.value("patch_throttled", 0);
      sp.patch_low_clock = s.value("patch_low_clock", 0);
      g.speed = sp;
    }
    rows.push_back(std::move(g));
  }
  return rows;
}

std::string gate_markdown(const GateReport& r) {
  std::string s = fmt::format("# driftgate gate: {}\n\nbase `{}`, patch `{}`, policy `{}`{}\n\n", verdict_name(r.verdict),
                              r.base, r.patch, r.policy_source,
                              r.claim ? fmt::format(", claimed speedup {:.2f}x", *r.claim) : "");
  s += "| case | base bits | patch bits | delta bits | max ULP | drift exp (base/patch) | speedup [interval] | verdict |\n";
  s += "|---|---|---|---|---|---|---|---|\n";
  for (const GateRow& g : r.rows) {
    const OutputResult* bo = primary_output(g.base);
    const OutputResult* po = primary_output(g.patch);
    std::string bb = bo ? fmt::format("{:.1f}", bo->metrics.bits) : "-";
    std::string pb = po ? fmt::format("{:.1f}", po->metrics.bits) : "-";
    std::string db = bo && po ? fmt::format("{:+.1f}", po->metrics.bits - bo->metrics.bits + 0.0) : "-";
    std::string ulp_s = po ? fmt::format("{:.3g}", po->metrics.ulp_max) : "-";
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
  bool any = false;
  for (const GateRow& g : r.rows) {
    if (g.verdict == Verdict::MERGE) continue;
    if (!any) s += "\n## Why\n\n";
    any = true;
    s += fmt::format("- `{}`: {}\n  - reproduce: `{}`\n", g.case_str, g.reasons(), g.reproduce);
  }
  return s;
}

std::string gate_junit(const GateReport& r) {
  int tests = 0, failures = 0;
  std::string body;
  for (const GateRow& g : r.rows) {
    for (const Check& c : g.checks) {
      ++tests;
      body += fmt::format("    <testcase classname=\"{}\" name=\"{}\">", xml_escape(g.case_str), xml_escape(c.name));
      if (!c.passed) {
        ++failures;
        body += fmt::format("<failure message=\"{}\">{}</failure>", xml_escape(c.detail),
                            xml_escape("reproduce: " + g.reproduce));
      }
      body += "</testcase>\n";
    }
  }
  return fmt::format("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"driftgate gate {} vs {}\" "
                     "tests=\"{}\" failures=\"{}\">\n{}  </testsuite>\n</testsuites>\n",
                     xml_escape(r.patch), xml_escape(r.base), tests, failures, body);
}

}  // namespace dg
