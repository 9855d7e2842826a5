#include "harness/report/run_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "harness/core/json_limits.h"
#include "harness/core/output_path.h"
#include "harness/report/report.h"
#include "harness/report/svg_plot.h"

namespace dg {
namespace {

using json = nlohmann::json;

// A number of a record: JSON numbers, or the strings "nan", "inf", "-inf" driftgate writes for
// them; anything else is NaN.
double num(const json& j, const char* key) { return json_number(j, key); }
std::string str(const json& j, const char* key);
}  // namespace

double json_number(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return std::nan("");
  const json& v = j.at(key);
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    return s == "inf" ? HUGE_VAL : s == "-inf" ? -HUGE_VAL : std::nan("");
  }
  return std::nan("");
}

namespace {
std::string str(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : std::string();
}
std::string fixed(double v, int digits) { return std::isfinite(v) ? fmt::format("{:.{}f}", v, digits) : "-"; }
std::string general(double v) { return std::isfinite(v) ? fmt::format("{:.3g}", v) : "-"; }

// One candidate's record in a case, as a run shows it.
struct Entry {
  std::string role;        // "base", "patch", "naive", or "" (verify, bench)
  const json* record = nullptr;
};

// One case of one run.
struct CaseView {
  const RunFile* run = nullptr;
  std::string case_str, verdict, reproduce;
  std::vector<Entry> entries;
  const json* speed = nullptr;            // a gate row's speed
  std::vector<std::string> failed;        // a gate row's failed checks, "name: detail"
};

std::vector<CaseView> cases_of(const RunFile& run) {
  std::vector<CaseView> out;
  if (run.kind == "gate") {
    for (const json& r : run.j.at("rows")) {
      CaseView c;
      c.run = &run;
      c.case_str = str(r, "case");
      c.verdict = str(r, "verdict");
      c.reproduce = str(r, "reproduce");
      for (const char* role : {"base", "patch", "naive"})
        if (r.contains(role) && r.at(role).is_object()) c.entries.push_back({role, &r.at(role)});
      if (r.contains("speed") && r.at("speed").is_object()) c.speed = &r.at("speed");
      for (const json& k : r.value("checks", json::array()))
        if (!k.value("passed", true)) c.failed.push_back(str(k, "name") + ": " + str(k, "detail"));
      out.push_back(std::move(c));
    }
  } else if (run.kind == "verify") {
    std::map<std::string, size_t> at;
    for (const json& r : run.j.at("records")) {
      const std::string cs = str(r, "case");
      if (!at.count(cs)) {
        at[cs] = out.size();
        CaseView c;
        c.run = &run;
        c.case_str = cs;
        out.push_back(std::move(c));
      }
      out[at[cs]].entries.push_back({"", &r});
    }
  }
  return out;
}

std::string who(const Entry& e) {
  const std::string cand = str(*e.record, "candidate");
  return e.role.empty() ? cand : e.role + " " + cand;
}

// The output whose bits, ULP and drift a table shows first ("o", else "y", else the first).
const json* primary(const json& rec) {
  if (!rec.contains("outputs") || !rec.at("outputs").is_object() || rec.at("outputs").empty()) return nullptr;
  const json& o = rec.at("outputs");
  for (const char* n : {"o", "y"})
    if (o.contains(n)) return &o.at(n);
  return &o.begin().value();
}

const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string role_color(const Entry& e, size_t i) {
  if (e.role == "base") return "#1f77b4";
  if (e.role == "patch") return "#ff7f0e";
  if (e.role == "naive") return "#7f7f7f";
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

std::string verdict_color(const std::string& v) {
  if (v == "FASTER") return "#2ca02c";
  if (v == "SLOWER") return "#d62728";
  return "#7f7f7f";
}

// --- summary --------------------------------------------------------------------------------------

struct Lines {
  std::vector<std::string> items;   // Markdown-ish text: `code` and **bold** only
};

Lines summary_of(const RunFile& run, const std::vector<CaseView>& cases) {
  Lines l;
  const json& j = run.j;
  if (run.kind == "gate") {
    const json s = j.value("summary", json::object());
    l.items.push_back(fmt::format("**{}**: patch `{}` against base `{}`{}; {} of {} cases judged", str(j, "verdict_text"),
                                  str(j, "patch"), str(j, "base"), str(j, "suite").empty() ? "" : " on suite `" + str(j, "suite") + "`",
                                  j.value("judged", 0), j.value("planned", 0)));
    if (s.value("speedup_cases", 0) > 0)
      l.items.push_back(fmt::format("speed: {} faster, {} same, {} slower, {} undecided; geometric mean speedup {} "
                                    "[{}, {}] over {} timed cases",
                                    s.value("faster", 0), s.value("same", 0), s.value("slower", 0), s.value("ambiguous", 0),
                                    fixed(num(s, "speedup_geomean"), 3), fixed(num(s, "speedup_lo"), 3),
                                    fixed(num(s, "speedup_hi"), 3), s.value("speedup_cases", 0)));
    for (const CaseView& c : cases) {
      if (c.speed && str(*c.speed, "verdict") == "FASTER")
        l.items.push_back(fmt::format("faster: `{}` {}x [{}, {}]", c.case_str, fixed(num(*c.speed, "speedup"), 3),
                                      fixed(num(*c.speed, "lo"), 3), fixed(num(*c.speed, "hi"), 3)));
      const json *b = nullptr, *p = nullptr;
      for (const Entry& e : c.entries) {
        if (e.role == "base") b = e.record;
        if (e.role == "patch") p = e.record;
      }
      if (b && p && b->contains("outputs") && p->contains("outputs"))
        for (const auto& [name, po] : p->at("outputs").items())
          if (b->at("outputs").contains(name)) {
            const double d = num(po, "bits") - num(b->at("outputs").at(name), "bits");
            if (d <= -1) l.items.push_back(fmt::format("lost precision: `{}` output {}: {} bits against the base's {} ({})", c.case_str,
                                                       name, fixed(num(po, "bits"), 1), fixed(num(b->at("outputs").at(name), "bits"), 1),
                                                       fixed(d, 1)));
          }
      if (c.verdict == "SKIPPED" || c.verdict == "CANNOT_JUDGE") {
        std::string why;
        for (const Entry& e : c.entries)
          if (!str(*e.record, "reason").empty()) why += (why.empty() ? "" : "; ") + who(e) + ": " + str(*e.record, "reason");
        l.items.push_back(fmt::format("not judged ({}): `{}`{}", c.verdict, c.case_str, why.empty() ? "" : " — " + why));
      }
      if (c.verdict == "REJECT")
        for (const std::string& f : c.failed) l.items.push_back(fmt::format("rejected: `{}` — {}", c.case_str, f));
    }
  } else if (run.kind == "verify") {
    int passed = 0, failed = 0, other = 0;
    for (const json& r : j.at("records")) {
      const std::string d = str(r, "disposition");
      (d == "PASSED" ? passed : d == "INCORRECT" || d == "ERRORED" || d == "INVALID" ? failed : other)++;
    }
    l.items.push_back(fmt::format("**verify**: {} rows, {} passed, {} failed, {} skipped or not supported", passed + failed + other,
                                  passed, failed, other));
    for (const json& r : j.at("records")) {
      const std::string d = str(r, "disposition");
      if (d == "INCORRECT" || d == "ERRORED" || d == "INVALID")
        l.items.push_back(fmt::format("{}: `{}` on `{}` — {}", d, str(r, "candidate"), str(r, "case"), str(r, "reason")));
    }
  } else {
    l.items.push_back(fmt::format("**bench**: {} timed rows", j.at("driftgate_rows").size()));
    for (const json& r : j.at("driftgate_rows"))
      if (str(r, "flag") != "PASSED")
        l.items.push_back(fmt::format("not timed: `{}` on `{}` ({})", str(r, "candidate"), str(r, "case"), str(r, "flag")));
  }
  return l;
}

// `code` and **bold** of a summary line as HTML.
std::string inline_html(const std::string& s) {
  std::string out;
  bool code = false, bold = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '`') {
      out += code ? "</code>" : "<code>";
      code = !code;
    } else if (!code && s.compare(i, 2, "**") == 0) {
      out += bold ? "</b>" : "<b>";
      bold = !bold;
      ++i;
    } else {
      out += xml_escape(std::string(1, s[i]));
    }
  }
  if (code) out += "</code>";
  if (bold) out += "</b>";
  return out;
}

// --- tables ---------------------------------------------------------------------------------------

}  // namespace

std::string table_md(const Table& t) {
  auto cell = [](const std::string& s) {   // a '|' inside a cell is escaped
    std::string o;
    for (char c : s) o += c == '|' ? std::string("\\|") : std::string(1, c);
    return o;
  };
  std::string s = "|";
  for (const std::string& h : t.head) s.append(" ").append(cell(h)).append(" |");
  s += "\n|";
  for (size_t i = 0; i < t.head.size(); ++i) s += "---|";
  s += "\n";
  for (const auto& r : t.rows) {
    s += "|";
    for (const std::string& c : r) s.append(" ").append(cell(c)).append(" |");
    s += "\n";
  }
  return s;
}

std::string table_html(const Table& t, const std::string& cls) {
  std::string s = "<table class=\"" + cls + "\"><thead><tr>";
  for (const std::string& h : t.head) s += "<th>" + xml_escape(h) + "</th>";
  s += "</tr></thead><tbody>";
  for (const auto& r : t.rows) {
    s += "<tr>";
    for (const std::string& c : r) s += "<td>" + inline_html(c) + "</td>";
    s += "</tr>";
  }
  return s + "</tbody></table>";
}

namespace {

Table precision_table(const std::vector<CaseView>& cases) {
  Table t{{"case", "candidate", "output", "bits", "vs base", "ULP at rms", "ULP p99", "ULP max", "NaN/Inf mismatches", "disposition"}, {}};
  for (const CaseView& c : cases) {
    const json* base = nullptr;
    for (const Entry& e : c.entries)
      if (e.role == "base") base = e.record;
    for (const Entry& e : c.entries) {
      const json& rec = *e.record;
      if (!rec.contains("outputs") || !rec.at("outputs").is_object() || rec.at("outputs").empty()) {
        t.rows.push_back({"`" + c.case_str + "`", who(e), "-", "-", "-", "-", "-", "-", "-", str(rec, "disposition")});
        continue;
      }
      for (const auto& [name, o] : rec.at("outputs").items()) {
        std::string delta = "-";
        if (base && e.record != base && base->contains("outputs") && base->at("outputs").contains(name))
          delta = fmt::format("{:+.1f}", num(o, "bits") - num(base->at("outputs").at(name), "bits"));
        const double nf = num(o, "nonfinite_mismatch");
        t.rows.push_back({"`" + c.case_str + "`", who(e), name, fixed(num(o, "bits"), 1), delta, general(num(o, "ulp_rms_max")),
                          general(num(o, "ulp_p99")), general(num(o, "ulp_max")),
                          nf > 0 ? fmt::format("**{:.0f}**", nf) : fixed(nf, 0), str(rec, "disposition")});
      }
    }
  }
  return t;
}

// The op's own measures (OpSpec::measure: a router's wide flips, a GEMM's format bound), one row
// per measure of every record that has them; empty when none has.
Table measures_table(const std::vector<CaseView>& cases) {
  Table t{{"case", "candidate", "measure", "value", "limit", "judged", "disposition"}, {}};
  for (const CaseView& c : cases)
    for (const Entry& e : c.entries) {
      const json& rec = *e.record;
      if (!rec.contains("measures") || !rec.at("measures").is_object()) continue;
      for (const auto& [name, m] : rec.at("measures").items()) {
        const double value = num(m, "value"), limit = num(m, "limit");
        const bool relative = m.contains("relative") && m.at("relative").is_boolean() && m.at("relative").get<bool>();
        const bool over = !std::isnan(limit) && !(value <= limit);
        const std::string v = general(value);
        t.rows.push_back({"`" + c.case_str + "`", who(e), name, over ? "**" + v + "**" : v,
                          std::isnan(limit) ? "-" : general(limit),
                          relative ? (std::isnan(limit) ? "against base and naive" : "absolute; against base and naive")
                                   : (std::isnan(limit) ? "report only" : "absolute"),
                          str(rec, "disposition")});
      }
    }
  return t;
}

// Speed rows: a gate's speedups, or a bench's ratios against each case's first candidate (the
// interval from the two medians' intervals, conservative: lo = first.lo / this.hi).
struct SpeedLine {
  std::string label, verdict;
  double estimate = 0, lo = 0, hi = 0, p = std::nan(""), pct = std::nan(""), base_s = std::nan(""), patch_s = std::nan("");
};

std::vector<SpeedLine> speed_lines(const RunFile& run, const std::vector<CaseView>& cases) {
  std::vector<SpeedLine> v;
  if (run.kind == "gate") {
    for (const CaseView& c : cases)
      if (c.speed)
        v.push_back({c.case_str, str(*c.speed, "verdict"), num(*c.speed, "speedup"), num(*c.speed, "lo"), num(*c.speed, "hi"),
                     num(*c.speed, "mann_whitney_p"), num(*c.speed, "pct_of_limit_patch"), num(*c.speed, "base_median_s"),
                     num(*c.speed, "patch_median_s")});
  } else if (run.kind == "bench") {
    std::map<std::string, const json*> first;
    for (const json& r : run.j.at("driftgate_rows")) {
      if (str(r, "flag") != "PASSED") continue;
      const std::string cs = str(r, "case");
      if (!first.count(cs)) {
        first[cs] = &r;
        continue;
      }
      const json& f = *first[cs];
      v.push_back({str(r, "candidate") + " vs " + str(f, "candidate") + " on " + cs, "", num(f, "median_s") / num(r, "median_s"),
                   num(f, "lo_s") / num(r, "hi_s"), num(f, "hi_s") / num(r, "lo_s"), std::nan(""), num(r, "pct_of_limit"),
                   num(f, "median_s"), num(r, "median_s")});
    }
  }
  return v;
}

Table speed_table(const std::vector<SpeedLine>& lines) {
  Table t{{"case", "speedup", "interval", "verdict", "rank test p", "% of limit", "base median", "patch median"}, {}};
  auto ms = [](double s) { return std::isfinite(s) ? fmt::format("{:.3f} ms", 1e3 * s) : std::string("-"); };
  for (const SpeedLine& l : lines)
    t.rows.push_back({"`" + l.label + "`", fixed(l.estimate, 3), "[" + fixed(l.lo, 3) + ", " + fixed(l.hi, 3) + "]",
                      l.verdict.empty() ? "-" : l.verdict, general(l.p), fixed(l.pct, 1), ms(l.base_s), ms(l.patch_s)});
  return t;
}

Table provenance_table(const RunFile& run) {
  const json ctx = run.j.value("context", json::object());
  Table t{{"field", "value"}, {}};
  t.rows.push_back({"file", "`" + run.path + "`"});
  t.rows.push_back({"kind", run.kind});
  for (const char* k : {"driftgate_version", "git_commit", "git_dirty", "compiler", "flags", "cpu", "cores", "gpu", "command"})
    if (ctx.contains(k)) t.rows.push_back({k, "`" + (ctx.at(k).is_string() ? ctx.at(k).get<std::string>() : ctx.at(k).dump()) + "`"});
  for (const char* k : {"started_at", "finished_at", "policy", "run_id"})
    if (run.j.contains(k) && run.j.at(k).is_string()) t.rows.push_back({k, "`" + run.j.at(k).get<std::string>() + "`"});
  if (run.j.contains("digests") && run.j.at("digests").is_object())
    for (const auto& [k, v] : run.j.at("digests").items()) {
      if (v.is_object())
        for (const auto& [o, d] : v.items()) t.rows.push_back({"digest " + o, "`" + (d.is_string() ? d.get<std::string>() : d.dump()) + "`"});
      else
        t.rows.push_back({"digest " + k, "`" + (v.is_string() ? v.get<std::string>() : v.dump()) + "`"});
    }
  return t;
}

std::vector<std::string> reproduce_commands(const RunFile& run, const std::vector<CaseView>& cases) {
  std::vector<std::string> v;
  for (const CaseView& c : cases) {
    if (!c.reproduce.empty()) v.push_back(c.reproduce);
    else
      for (const Entry& e : c.entries)
        if (!str(*e.record, "reproduce").empty()) v.push_back(str(*e.record, "reproduce"));
  }
  if (run.kind == "bench" && run.j.contains("context")) v.push_back(str(run.j.at("context"), "command"));
  return v;
}

// --- drift plots ----------------------------------------------------------------------------------

std::optional<LinePlot> drift_plot(const CaseView& c) {
  LinePlot p;
  p.title = "error against context position: " + c.case_str;
  p.x_label = "context position (tokens; each point a bucket of positions)";
  p.y_label = "rms error / rms reference";
  size_t i = 0;
  for (const Entry& e : c.entries) {
    const json* o = primary(*e.record);
    if (!o || !o->contains("drift") || !o->at("drift").is_object()) continue;
    Series s;
    s.name = fmt::format("{} (growth {})", who(e), fixed(num(o->at("drift"), "growth_exponent"), 2));
    s.color = role_color(e, i++);
    s.dashed = e.role == "naive";
    for (const json& b : o->at("drift").value("buckets", json::array())) {
      s.x.push_back(0.5 * (num(b, "begin") + num(b, "end")));
      s.y.push_back(num(b, "rms_ratio"));
    }
    p.series.push_back(std::move(s));
  }
  if (p.series.empty()) return std::nullopt;
  return p;
}

const char* kCss = R"(body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:24px}h2{font-size:19px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}h3{font-size:15px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4}code{font-size:11px;background:#f6f6f6;padding:0 2px}ul.summary li{margin:3px 0}
svg.plot{display:block;margin:10px 0;background:#fff}svg .grid{stroke:#e6e6e6;stroke-width:1}svg .frame{fill:none;stroke:#555;stroke-width:1}
svg .tick{font-size:10px;fill:#444}svg .label{font-size:12px;fill:#222}svg .title{font-size:13px;font-weight:600;fill:#222}
svg .legend{font-size:11px;fill:#222}svg .rowlabel{font-size:10px;fill:#333;font-family:monospace}
svg .same{stroke:#444;stroke-width:1.2}svg .claim{stroke:#d62728;stroke-width:1.2;stroke-dasharray:6 3}
.verdict-MERGE{color:#2ca02c}.verdict-REJECT{color:#d62728}details{margin:6px 0}pre{font-size:11px;background:#f6f6f6;padding:6px;overflow-x:auto})";

}  // namespace

std::string html_page(const std::string& title, const std::string& body) {
  return std::string("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>") + xml_escape(title) +
         "</title><style>" + kCss + "</style></head><body>\n<h1>" + xml_escape(title) + "</h1>\n" + body + "</body></html>\n";
}

RunFile read_run_file(const std::string& path) {
  RunFile f;
  f.path = path;
  const std::string text = read_regular_file("report", path, size_t{1} << 30);
  try {
    f.j = parse_json_bounded(text);
  } catch (const std::exception& e) {
    throw InputError(fmt::format("report: {} is not JSON ({})", path, e.what()));
  }
  if (f.j.is_object() && f.j.value("kind", "") == "gate" && f.j.contains("rows") && f.j.at("rows").is_array()) f.kind = "gate";
  else if (f.j.is_object() && f.j.contains("records") && f.j.at("records").is_array()) f.kind = "verify";
  else if (f.j.is_object() && f.j.contains("driftgate_rows") && f.j.at("driftgate_rows").is_array()) f.kind = "bench";
  else
    throw InputError(fmt::format("report: {} is not the JSON of a driftgate verify (--json), bench (--json) or gate "
                                 "(--out DIR/verdict.json) run",
                                 path));
  // Every row must be an object: the renderers index into them.
  for (const char* key : {"rows", "records", "driftgate_rows"})
    if (f.j.contains(key) && f.j.at(key).is_array())
      for (const json& r : f.j.at(key))
        if (!r.is_object()) throw InputError(fmt::format("report: {}: an entry of \"{}\" is not an object", path, key));
  return f;
}

RenderedReport render_report(const std::vector<RunFile>& runs) {
  std::vector<std::vector<CaseView>> cases;
  for (const RunFile& r : runs) cases.push_back(cases_of(r));
  std::string html = "<p>From ";
  std::string md = "# driftgate report\n\nFrom ";
  for (size_t i = 0; i < runs.size(); ++i) {
    html += (i ? ", " : "") + std::string("<code>") + xml_escape(runs[i].path) + "</code> (" + runs[i].kind + ")";
    md += (i ? ", " : "") + std::string("`") + runs[i].path + "` (" + runs[i].kind + ")";
  }
  html += ".</p>\n";
  md += ".\n";

  html += "<section id=\"summary\"><h2>Summary</h2>\n";
  md += "\n## Summary\n\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const Lines l = summary_of(runs[i], cases[i]);
    html += "<ul class=\"summary\">";
    for (const std::string& s : l.items) {
      html += "<li>" + inline_html(s) + "</li>";
      md += "- " + s + "\n";
    }
    html += "</ul>\n";
  }
  html += "</section>\n";

  html += "<section id=\"speed\"><h2>Speed</h2>\n";
  md += "\n## Speed\n\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::vector<SpeedLine> lines = speed_lines(runs[i], cases[i]);
    if (lines.empty()) continue;
    ForestPlot f;
    f.title = (runs[i].kind == "gate" ? "speedup of the patch over the base, 95% interval: " : "speedup, from the medians' intervals: ") +
              runs[i].path;
    f.x_label = "speedup = time(base) / time(patch) (log scale; right of 1 is faster)";
    if (runs[i].j.contains("claim") && runs[i].j.at("claim").is_number()) f.claim = runs[i].j.at("claim").get<double>();
    for (const SpeedLine& l : lines) f.rows.push_back({l.label, l.estimate, l.lo, l.hi, verdict_color(l.verdict)});
    const Table t = speed_table(lines);
    html += forest_plot_svg(f) + table_html(t, "speed") + "\n";
    md += "### " + runs[i].path + "\n\n" + table_md(t) + "\n";
  }
  html += "</section>\n";

  html += "<section id=\"drift\"><h2>Drift: error against context position</h2>\n";
  md += "\n## Drift\n\nThe HTML report plots each case's error against context position (log-log), with the growth "
        "exponents below.\n\n";
  for (size_t i = 0; i < runs.size(); ++i)
    for (const CaseView& c : cases[i])
      if (const std::optional<LinePlot> p = drift_plot(c)) {
        html += line_plot_svg(*p) + "\n";
        for (const Series& s : p->series) md += "- `" + c.case_str + "`: " + s.name + "\n";
      }
  html += "</section>\n";

  html += "<section id=\"precision\"><h2>Precision</h2>\n";
  md += "\n## Precision\n\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].kind == "bench") continue;
    const Table t = precision_table(cases[i]);
    html += "<h3>" + xml_escape(runs[i].path) + "</h3>" + table_html(t, "precision") + "\n";
    md += "### " + runs[i].path + "\n\n" + table_md(t) + "\n";
    const Table m = measures_table(cases[i]);
    if (m.rows.empty()) continue;
    html += "<h4>the op's own measures</h4>" + table_html(m, "measures") + "\n";
    md += "The op's own measures:\n\n" + table_md(m) + "\n";
  }
  html += "</section>\n";

  html += "<section id=\"provenance\"><h2>Provenance and reproduce commands</h2>\n";
  md += "\n## Provenance\n\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const Table t = provenance_table(runs[i]);
    html += "<h3>" + xml_escape(runs[i].path) + "</h3>" + table_html(t, "provenance");
    md += "### " + runs[i].path + "\n\n" + table_md(t) + "\n";
    const std::vector<std::string> cmds = reproduce_commands(runs[i], cases[i]);
    if (!cmds.empty()) {
      html += "<details><summary>reproduce commands (" + std::to_string(cmds.size()) + ")</summary><pre>";
      md += "Reproduce:\n\n```sh\n";
      for (const std::string& c : cmds) {
        html += xml_escape(c) + "\n";
        md += c + "\n";
      }
      html += "</pre></details>\n";
      md += "```\n\n";
    }
  }
  html += "</section>\n";
  return {html_page("driftgate report", html), md};
}

}  // namespace dg
