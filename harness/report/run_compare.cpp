#include "harness/report/run_compare.h"

#include <cmath>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "harness/judge/policy.h"
#include "harness/report/report.h"
#include "harness/metrics/stats.h"
#include "harness/report/svg_plot.h"

namespace dg {
namespace {

using json = nlohmann::json;

constexpr double kBitsChange = 1.0;   // a change of a bit or more is LOST / GAINED precision

std::string str(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : std::string();
}
std::string fixed(double v, int digits) { return std::isfinite(v) ? fmt::format("{:.{}f}", v, digits) : "-"; }

// One comparable row of a run: its key, the record whose outputs are compared, its outcome
// (disposition or gate verdict) and, for speed, either raw samples (bench) or a speedup interval
// (gate).
struct Side {
  std::string key, case_str, candidate, outcome;
  const json* record = nullptr;                 // outputs to compare (verify record, gate patch)
  std::vector<double> samples;                  // bench: seconds of each timed call
  std::optional<RatioInterval> speedup;         // gate: the patch over its base
};

// A verify record or a bench row: keyed by candidate and case.
Side candidate_side(const json& r, const char* outcome_key) {
  Side s;
  s.case_str = str(r, "case");
  s.candidate = str(r, "candidate");
  s.key = s.candidate + " on " + s.case_str;
  s.outcome = str(r, outcome_key);
  return s;
}

std::map<std::string, Side> sides_of(const RunFile& run) {
  std::map<std::string, Side> m;
  if (run.kind == "gate") {
    for (const json& r : run.j.at("rows")) {
      Side s;
      s.case_str = s.key = str(r, "case");
      s.outcome = str(r, "verdict");
      if (r.contains("patch") && r.at("patch").is_object()) {
        s.record = &r.at("patch");
        s.candidate = str(r.at("patch"), "candidate");
      }
      if (r.contains("speed") && r.at("speed").is_object()) {
        const json& sp = r.at("speed");
        const RatioInterval ci{json_number(sp, "speedup"), json_number(sp, "lo"), json_number(sp, "hi")};
        if (ci.estimate > 0 && ci.lo > 0 && ci.hi > 0) s.speedup = ci;
      }
      m[s.key] = std::move(s);
    }
  } else if (run.kind == "verify") {
    for (const json& r : run.j.at("records")) {
      Side s = candidate_side(r, "disposition");
      s.record = &r;
      m[s.key] = std::move(s);
    }
  } else {
    for (const json& r : run.j.at("driftgate_rows")) {
      Side s = candidate_side(r, "flag");
      m[s.key] = std::move(s);
    }
    // Google Benchmark's iteration entries hold every timed call: name "candidate/case".
    for (const json& b : run.j.value("benchmarks", json::array())) {
      if (!b.is_object() || str(b, "run_type") != "iteration") continue;
      const std::string name = str(b, "name");
      const size_t slash = name.find('/');
      if (slash == std::string::npos) continue;
      const std::string key = name.substr(0, slash) + " on " + name.substr(slash + 1);
      const std::string unit = str(b, "time_unit");
      const double scale = unit == "ns" ? 1e-9 : unit == "us" ? 1e-6 : unit == "ms" ? 1e-3 : 1.0;
      const double t = json_number(b, "real_time") * scale;
      if (m.count(key) && std::isfinite(t) && t > 0) m[key].samples.push_back(t);
    }
  }
  return m;
}

bool failed_outcome(const std::string& o) {
  return o == "INCORRECT" || o == "ERRORED" || o == "INVALID" || o == "REJECT" || o == "CANNOT_JUDGE";
}
bool good_outcome(const std::string& o) { return o == "PASSED" || o == "MERGE"; }

// time(A) / time(B) or speedup(B) / speedup(A): > 1 when B is faster.
std::optional<RatioInterval> speed_change(const Side& a, const Side& b) {
  if (a.samples.size() >= 2 && b.samples.size() >= 2) return bootstrap_ratio_ci(a.samples, b.samples, 0.95, 2000, 11);
  if (a.speedup && b.speedup) {
    // Each row's interval as normal in log space (95%: +-1.96 se); independent runs: se add in quadrature.
    auto se = [](const RatioInterval& r) { return (std::log(r.hi) - std::log(r.lo)) / (2 * 1.959964); };
    const double d = std::log(b.speedup->estimate) - std::log(a.speedup->estimate);
    const double s = std::hypot(se(*a.speedup), se(*b.speedup));
    return RatioInterval{std::exp(d), std::exp(d - 1.959964 * s), std::exp(d + 1.959964 * s)};
  }
  return std::nullopt;
}

}  // namespace

Comparison compare_runs(const RunFile& a, const RunFile& b) {
  if (a.kind != b.kind)
    throw InputError(fmt::format("compare: {} is a {} run and {} a {} run; compare two runs of the same kind", a.path, a.kind,
                                 b.path, b.kind));
  const std::map<std::string, Side> sa = sides_of(a), sb = sides_of(b);
  const double min_effect = default_policy().min_effect;
  Comparison c;
  json rows = json::array(), only_a = json::array(), only_b = json::array();
  Table t{{"row", "bits A", "bits B", "change", "speed B vs A", "interval", "outcomes A / B", "verdict"}, {}};
  ForestPlot forest;
  forest.title = "speed of B against A (95% interval; right of 1: B is faster)";
  forest.x_label = a.kind == "gate" ? "speedup(B) / speedup(A), each over its own base (log scale)"
                                    : "time(A) / time(B) (log scale; right of 1: B is faster)";
  for (const auto& [key, x] : sa) {
    if (!sb.count(key)) {
      only_a.push_back(key);
      continue;
    }
    const Side& y = sb.at(key);
    json row = {{"row", key}, {"case", x.case_str}, {"candidate", x.candidate}, {"outcome_a", x.outcome}, {"outcome_b", y.outcome}};
    // Precision: every output both records have.
    double worst = HUGE_VAL, best = -HUGE_VAL;
    std::string bits_a, bits_b, change;
    json outputs = json::object();
    if (x.record && y.record && x.record->contains("outputs") && y.record->contains("outputs"))
      for (const auto& [name, oa] : x.record->at("outputs").items()) {
        if (!y.record->at("outputs").contains(name)) continue;
        const double ba = json_number(oa, "bits"), bb = json_number(y.record->at("outputs").at(name), "bits");
        const double d = bb - ba;
        outputs[name] = {{"bits_a", ba}, {"bits_b", bb}, {"change", std::isfinite(d) ? json(d) : json(nullptr)}};
        if (std::isfinite(d)) worst = std::min(worst, d), best = std::max(best, d);
        bits_a += (bits_a.empty() ? "" : ", ") + name + " " + fixed(ba, 1);
        bits_b += (bits_b.empty() ? "" : ", ") + name + " " + fixed(bb, 1);
        change += (change.empty() ? "" : ", ") + (std::isfinite(d) ? fmt::format("{:+.1f}", d) : std::string("-"));
      }
    row["outputs"] = outputs;
    // The row's verdict: an outcome that changed first, then precision, then speed.
    std::vector<std::string> verdict;
    bool regressed = false;
    if (good_outcome(x.outcome) && failed_outcome(y.outcome)) verdict.push_back("BROKE"), regressed = true;
    if (failed_outcome(x.outcome) && good_outcome(y.outcome)) verdict.push_back("FIXED");
    if (worst <= -kBitsChange) verdict.push_back("LOST PRECISION"), regressed = true;
    else if (best >= kBitsChange) verdict.push_back("GAINED PRECISION");
    std::string speed = "-", interval = "-";
    if (const std::optional<RatioInterval> ci = speed_change(x, y)) {
      const std::string v(verdict_name(speed_verdict(*ci, min_effect)));
      row["speed"] = {{"change", ci->estimate}, {"lo", ci->lo}, {"hi", ci->hi}, {"verdict", v}};
      speed = fixed(ci->estimate, 3);
      interval = "[" + fixed(ci->lo, 3) + ", " + fixed(ci->hi, 3) + "]";
      verdict.push_back(v);   // (information: speed between runs does not set the exit code)
      forest.rows.push_back({key, ci->estimate, ci->lo, ci->hi, v == "FASTER" ? "#2ca02c" : v == "SLOWER" ? "#d62728" : "#7f7f7f"});
    }
    if (verdict.empty()) verdict.push_back("SAME");
    std::string text;
    for (const std::string& v : verdict) text += (text.empty() ? "" : ", ") + v;
    row["verdict"] = text;
    row["regressed"] = regressed;
    c.regressions += regressed;
    t.rows.push_back({"`" + key + "`", bits_a.empty() ? "-" : bits_a, bits_b.empty() ? "-" : bits_b, change.empty() ? "-" : change,
                      speed, interval, x.outcome + " / " + y.outcome, regressed ? "**" + text + "**" : text});
    rows.push_back(std::move(row));
  }
  for (const auto& [key, y] : sb)
    if (!sa.count(key)) only_b.push_back(key);
  if (rows.empty())
    throw InputError(fmt::format("compare: {} and {} have no row in common (rows are matched by {})", a.path, b.path,
                                 a.kind == "gate" ? "case" : "case and candidate"));

  c.json = {{"schema_version", 1}, {"kind", a.kind}, {"a", a.path}, {"b", b.path}, {"rows", rows}, {"only_in_a", only_a},
            {"only_in_b", only_b}, {"regressions", c.regressions}, {"min_effect", min_effect}, {"bits_change", kBitsChange}};
  std::string head = fmt::format("A `{}`, B `{}` ({} runs): {} rows compared, {} lost precision or broke. Speed compares runs "
                                 "made at different times: its interval covers the noise within each run, not the drift "
                                 "between runs (two runs an hour apart on one shared machine differ by up to 10%), so it does "
                                 "not set the exit code; `gate` times two kernels interleaved in one run for a decision.",
                                 a.path, b.path, a.kind, rows.size(), c.regressions);
  std::string tail;
  if (!only_a.empty()) tail += fmt::format("\nOnly in A ({}): {}\n", only_a.size(), only_a.dump());
  if (!only_b.empty()) tail += fmt::format("\nOnly in B ({}): {}\n", only_b.size(), only_b.dump());
  c.markdown = "# driftgate compare\n\n" + head + "\n\n" + table_md(t) + tail;
  std::string body = "<p>" + xml_escape(head) + "</p>\n";
  if (!forest.rows.empty()) body += forest_plot_svg(forest) + "\n";
  body += table_html(t, "compare") + "\n";
  if (!tail.empty()) body += "<pre>" + xml_escape(tail) + "</pre>\n";
  c.html = html_page("driftgate compare", body);
  return c;
}

}  // namespace dg
