#include "harness/judge/mutants.h"
#include "harness/core/progress.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <iostream>

#include <fmt/format.h>

#include "datasets/suites.h"
#include "harness/cases/case_memory.h"
#include "harness/core/output_path.h"
#include "harness/report/report.h"
#include "harness/core/threads.h"
#include "kill_rates.h"   // generated from datasets/kill_rates.json

namespace dg {

bool VariantRow::rejected() const {
  return std::any_of(cells.begin(), cells.end(), [](const KillCell& c) { return c.verdict == Verdict::REJECT; });
}

int KillMatrix::mutants() const {
  return static_cast<int>(std::count_if(rows.begin(), rows.end(), [](const VariantRow& r) { return r.kind == "mutant"; }));
}
int KillMatrix::killed() const {
  return static_cast<int>(
      std::count_if(rows.begin(), rows.end(), [](const VariantRow& r) { return r.kind == "mutant" && r.rejected(); }));
}
int KillMatrix::equivalents() const { return static_cast<int>(rows.size()) - mutants(); }
int KillMatrix::false_rejects() const { return static_cast<int>(rejected_equivalents().size()); }
double KillMatrix::kill_rate() const { return mutants() ? static_cast<double>(killed()) / mutants() : 0.0; }
double VariantRow::kill_margin_bits() const {
  double m = -std::numeric_limits<double>::infinity();
  for (const KillCell& c : cells)
    if (c.verdict == Verdict::REJECT) m = std::max(m, c.margin_bits);
  return m;
}
std::vector<std::string> KillMatrix::weak_kills() const {
  std::vector<std::string> s;
  for (const VariantRow& r : rows)
    if (r.kind == "mutant" && r.rejected() && r.kill_margin_bits() < kWeakKillBits) s.push_back(r.candidate);
  return s;
}
std::vector<std::string> KillMatrix::survivors() const {
  std::vector<std::string> s;
  for (const VariantRow& r : rows)
    if (r.kind == "mutant" && !r.rejected()) s.push_back(r.candidate);
  return s;
}
std::vector<std::string> KillMatrix::rejected_equivalents() const {
  std::vector<std::string> s;
  for (const VariantRow& r : rows)
    if (r.kind == "equivalent" && r.rejected()) s.push_back(r.candidate);
  return s;
}

std::vector<std::pair<std::string, std::string>> KillMatrix::unjudged() const {
  std::vector<std::pair<std::string, std::string>> u;
  for (size_t ci = 0; ci < cases.size(); ++ci)
    if (!rows.empty() && std::all_of(rows.begin(), rows.end(), [&](const VariantRow& r) {
          return ci < r.cells.size() && r.cells[ci].verdict == Verdict::CANNOT_JUDGE;
        }))
      u.push_back({cases[ci], rows[0].cells[ci].detail});
  return u;
}

std::vector<const Candidate*> variants_of(const std::string& op) {
  std::vector<const Candidate*> v;
  for (const Candidate* k : all_candidates())
    if (k->info().op == op && is_variant(k->info())) v.push_back(k);
  std::sort(v.begin(), v.end(), [](const Candidate* a, const Candidate* b) {
    // mutants first ("equivalent" < "mutant" reversed), then by name
    if (a->info().algorithm != b->info().algorithm) return a->info().algorithm == "mutant";
    return a->name() < b->name();
  });
  return v;
}

std::vector<Case> expand_seeds(const std::vector<Case>& cases, int seeds) {
  std::vector<Case> out;
  for (const Case& c : cases)
    for (int k = 0; k < seeds; ++k) out.push_back(k == 0 ? c : c.with("seed", std::to_string(c.seed() + k)));
  return out;
}

namespace {

// {OUT: {rms, max_abs, bits, ref_max_abs}} of a record's outputs (empty for a run with none).
nlohmann::json output_metrics_json(const Record& r) {
  nlohmann::json j = nlohmann::json::object();
  for (const OutputResult& o : r.outputs)
    j[o.name] = {{"rms", o.metrics.rms_ratio}, {"max_abs", o.metrics.max_abs}, {"bits", o.metrics.bits},
                 {"ref_max_abs", o.metrics.ref_max_abs}};
  return j;
}

}  // namespace

KillMatrix run_mutants(const Candidate& base, const std::vector<Case>& cases, const Policy& policy,
                       const MutantOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string& op = base.info().op;
  if (is_variant(base.info()) || is_canary(base.info()))
    throw InputError(fmt::format("mutants: the base {} is itself a {} candidate; give an honest base", base.name(),
                                 base.info().algorithm));
  KillMatrix m;
  m.base = base.name();
  m.policy_source = policy.source;
  m.command = opt.command;
  std::vector<const Case*> mine;
  for (const Case& c : cases) {
    if (c.op() == op) mine.push_back(&c);
    else m.skipped.push_back(c.str());
  }
  if (mine.empty()) throw InputError(fmt::format("mutants: no case of op {}, the base's op", op));
  std::vector<const Candidate*> variants;
  for (const Candidate* v : variants_of(op))
    if (opt.only.empty() || opt.only == v->info().algorithm + "s") variants.push_back(v);
  if (opt.only != "mutants")
    for (const Candidate* e : opt.equivalents) {
      if (e->info().op != op)
        throw InputError(fmt::format("mutants --equivalent {}: it is of op {}, the base's op is {}", e->name(),
                                     e->info().op, op));
      if (is_variant(e->info()) || is_canary(e->info()) || e == &base)
        throw InputError(fmt::format("mutants --equivalent {}: give an honest candidate other than the base (built-in "
                                     "equivalents always run)", e->name()));
      if (std::find(variants.begin(), variants.end(), e) == variants.end()) variants.push_back(e);
    }
  if (variants.empty())
    throw InputError(fmt::format("mutants: op {} has no {} to run", op, opt.only.empty() ? "variants" : opt.only));
  for (const Candidate* v : variants) {
    bool honest = !is_variant(v->info());
    m.rows.push_back({v->name(), honest ? "equivalent" : v->info().algorithm,
                      honest ? "an honest candidate given with --equivalent" : v->info().doc, {}, {}});
  }
  const OpSpec* spec = find_op(op);
  Progress progress(mine.size(), opt.progress);
  for (size_t ci = 0; ci < mine.size(); ++ci) {
    const Case& c = *mine[ci];
    const Progress::Scope line(progress, ci, c.str());
    m.cases.push_back(c.str());
    m.case_cost.push_back(spec && spec->flops ? spec->flops(c) : 0.0);
    // Base, naive and every variant on the same inputs and reference, as the gate runs them.
    std::vector<const Candidate*> cands = {&base};
    std::string naive_name = policy.naive_for(op, base.info().output_dtype);
    const Candidate* naive = naive_name.empty() ? nullptr : find_candidate(naive_name);
    if (!naive_name.empty() && !naive)
      throw InputError(fmt::format("policy {}: naive candidate '{}' is not registered", policy.source, naive_name));
    const size_t first_variant = naive && naive != &base ? 2 : 1;
    if (first_variant == 2) cands.push_back(naive);
    cands.insert(cands.end(), variants.begin(), variants.end());
    VerifyOptions vo = gate_verify_options(opt.tier, policy, opt.isolate, opt.worker_args, opt.wall_seconds, opt.memory_bytes);
    std::vector<Record> recs = verify_case(c, cands, vo);
    const Record* naive_rec = naive == &base ? &recs[0] : first_variant == 2 ? &recs[1] : nullptr;
    m.case_base.push_back(output_metrics_json(recs[0]));
    m.case_naive.push_back(naive_rec && naive_rec != &recs[0] ? output_metrics_json(*naive_rec) : nlohmann::json(nullptr));
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      GateRow row;
      row.case_str = c.str();
      row.base = recs[0];
      row.patch = recs[first_variant + vi];
      row.checks = precision_checks(row.base, row.patch, naive_rec, policy);
      row.verdict = case_verdict(row, policy);
      KillCell cell;
      cell.verdict = row.verdict;
      cell.metrics = output_metrics_json(row.patch);
      bool unmeasured = false;   // a failed check with no margin in bits (drift, a crashed patch)
      for (const Check& k : row.checks)
        if (!k.passed) {
          cell.fired.push_back(k.name);
          if (cell.detail.empty()) cell.detail = k.detail;
          if (std::isnan(k.margin_bits)) unmeasured = true;
          else cell.margin_bits = std::max(cell.margin_bits, k.margin_bits);
        }
      // Only when no failed check is measured in bits is the kill's margin unknown (+inf: not weak).
      if (unmeasured && cell.margin_bits == -std::numeric_limits<double>::infinity())
        cell.margin_bits = std::numeric_limits<double>::infinity();
      m.rows[vi].cells.push_back(std::move(cell));
    }
  }
  for (VariantRow& r : m.rows)
    for (size_t ci = 0; ci < r.cells.size(); ++ci)
      if (r.cells[ci].verdict == Verdict::REJECT && (!r.cheapest_kill || m.case_cost[ci] < m.case_cost[*r.cheapest_kill]))
        r.cheapest_kill = ci;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

namespace {

// The short tag of a cell in the table: "-" survived, "?" cannot judge, else the first rule that
// fired ("o.rms" for precision.o.rms, "patch" for a crashed or rule-breaking run), "+n" for n more.
std::string cell_tag(const KillCell& c) {
  if (c.verdict == Verdict::MERGE) return "-";
  if (c.verdict == Verdict::CANNOT_JUDGE) return "?";
  if (c.verdict == Verdict::SKIPPED) return "skip";
  if (c.fired.empty()) return "REJECT";
  std::string t = c.fired[0];
  if (t.rfind("precision.", 0) == 0) t = t.substr(10);
  if (c.fired.size() > 1) t += fmt::format("+{}", c.fired.size() - 1);
  return t;
}

// With several seeds a column is one case at every seed: "-" when each seed merged, else how many
// seeds rejected ("3/20") and the first rule that fired on the first of them.
std::string group_tag(const std::vector<KillCell>& cells, size_t first, int seeds) {
  int rejected = 0;
  const KillCell* shown = nullptr;
  for (size_t k = first; k < first + static_cast<size_t>(seeds) && k < cells.size(); ++k)
    if (cells[k].verdict != Verdict::MERGE) {
      if (!shown) shown = &cells[k];
      if (cells[k].verdict == Verdict::REJECT) ++rejected;
    }
  if (!shown) return "-";
  if (rejected == 0) return cell_tag(*shown);
  std::string t = cell_tag(*shown);
  return fmt::format("{}/{} {}", rejected, seeds, t.substr(0, t.find('+')));
}

}  // namespace

std::string kill_matrix_text(const KillMatrix& m) {
  const size_t seeds = static_cast<size_t>(std::max(1, m.seeds));
  const size_t columns = m.cases.size() / seeds;
  std::string s = fmt::format("kill matrix: {} variants of {} against base {} on {} cases{}{}\n", m.rows.size(),
                              m.rows.empty() ? "?" : "the op", m.base, columns,
                              m.suite.empty() ? "" : " of suite " + m.suite,
                              seeds > 1 ? fmt::format(", each at {} seeds", seeds) : "");
  for (size_t ci = 0; ci < columns; ++ci)
    s += fmt::format("  c{:<2} {} (cost {:.3g} flop){}\n", ci, m.cases[ci * seeds], m.case_cost[ci * seeds],
                     seeds > 1 ? fmt::format(" and seeds +1..+{}", seeds - 1) : "");
  for (const std::string& c : m.skipped) s += fmt::format("  (not run: {} is of another op)\n", c);
  const size_t width = seeds > 1 ? 18 : 14;
  s += fmt::format("{:<34}", "variant");
  for (size_t ci = 0; ci < columns; ++ci) s += fmt::format(" {:<{}}", fmt::format("c{}", ci), width);
  s += "  cheapest kill\n";
  for (const VariantRow& r : m.rows) {
    s += fmt::format("{:<34}", r.candidate);
    for (size_t ci = 0; ci < columns; ++ci)
      s += fmt::format(" {:<{}}", seeds > 1 ? group_tag(r.cells, ci * seeds, static_cast<int>(seeds)) : cell_tag(r.cells[ci]),
                       width);
    if (r.kind == "mutant") {
      s += r.cheapest_kill ? fmt::format("  {}", seeds > 1 ? m.cases[*r.cheapest_kill] : fmt::format("c{}", *r.cheapest_kill))
                           : "  SURVIVED";
      if (r.rejected() && r.kill_margin_bits() < kWeakKillBits)
        s += fmt::format(" (weak: {:.2f} bits past the limit at best)", r.kill_margin_bits());
    }
    else if (r.rejected()) {
      size_t bad = static_cast<size_t>(std::count_if(r.cells.begin(), r.cells.end(),
                                                     [](const KillCell& c) { return c.verdict == Verdict::REJECT; }));
      s += fmt::format("  FALSE REJECT ({} of {} runs)", bad, r.cells.size());
    }
    else s += "  (equivalent: merged everywhere)";
    s += "\n";
  }
  s += "cells: '-' survived (MERGE), '?' cannot judge (base or naive unsound), else the first rule that rejected it\n";
  auto list = [](const std::vector<std::string>& v) {
    std::string t;
    for (const std::string& x : v) t += (t.empty() ? "" : ", ") + x;
    return t.empty() ? std::string("none") : t;
  };
  for (const auto& [c, why] : m.unjudged()) s += fmt::format("not judged: {}: {}\n", c, why);
  if (m.mutants() == 0) s += "kill rate: no mutants run\n";
  else
    s += fmt::format("kill rate: {}/{} = {:.1f}%; survivors: {}\n", m.killed(), m.mutants(), 100 * m.kill_rate(),
                     list(m.survivors()));
  s += fmt::format("weak kills (under {:.0f} bit past the limit on every killing case): {}\n", kWeakKillBits,
                   list(m.weak_kills()));
  s += fmt::format("equivalent variants rejected (false rejects): {}/{}: {}\n", m.false_rejects(), m.equivalents(),
                   list(m.rejected_equivalents()));
  s += fmt::format("{:.1f} s\n", m.seconds);
  return s;
}

// A margin in bits as JSON: a number, "inf" (not measured in bits: a NaN/Inf, a crash, drift) or
// null (no failed check).
static nlohmann::json margin_json(double m) {
  if (std::isfinite(m)) return m;
  if (m > 0) return "inf";
  return nullptr;
}

nlohmann::json kill_matrix_json(const KillMatrix& m) {
  nlohmann::json cases = nlohmann::json::array();
  for (size_t ci = 0; ci < m.cases.size(); ++ci)
    cases.push_back({{"case", m.cases[ci]},
                     {"cost", m.case_cost[ci]},
                     {"base", ci < m.case_base.size() ? m.case_base[ci] : nlohmann::json(nullptr)},
                     {"naive", ci < m.case_naive.size() ? m.case_naive[ci] : nlohmann::json(nullptr)}});
  nlohmann::json variants = nlohmann::json::array();
  for (const VariantRow& r : m.rows) {
    nlohmann::json cells = nlohmann::json::array();
    for (size_t ci = 0; ci < r.cells.size(); ++ci)
      cells.push_back({{"case", m.cases[ci]},
                       {"verdict", verdict_name(r.cells[ci].verdict)},
                       {"fired", r.cells[ci].fired},
                       {"detail", r.cells[ci].detail},
                       {"margin_bits", margin_json(r.cells[ci].margin_bits)},
                       {"metrics", r.cells[ci].metrics}});
    nlohmann::json v = {{"candidate", r.candidate}, {"kind", r.kind}, {"doc", r.doc}, {"cells", cells}};
    v[r.kind == "mutant" ? "killed" : "rejected"] = r.rejected();
    v["rejected_cells"] = std::count_if(r.cells.begin(), r.cells.end(),
                                        [](const KillCell& c) { return c.verdict == Verdict::REJECT; });
    v["cheapest_kill"] = r.cheapest_kill ? nlohmann::json(m.cases[*r.cheapest_kill]) : nlohmann::json(nullptr);
    v["cheapest_kill_cost"] = r.cheapest_kill ? nlohmann::json(m.case_cost[*r.cheapest_kill]) : nlohmann::json(nullptr);
    if (r.kind == "mutant") v["kill_margin_bits"] = r.rejected() ? margin_json(r.kill_margin_bits()) : nlohmann::json(nullptr);
    variants.push_back(std::move(v));
  }
  return {{"schema_version", 1},
          {"kind", "driftgate.mutants"},
          {"context", run_context(m.command)},
          {"base", m.base},
          {"suite", m.suite.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.suite)},
          {"policy", m.policy_source},
          {"command", m.command},
          {"seconds", m.seconds},
          {"seeds", m.seeds},
          {"cases", cases},
          {"skipped_cases", m.skipped},
          {"unjudged_cases", [&] {
             nlohmann::json u = nlohmann::json::array();
             for (const auto& [c, why] : m.unjudged()) u.push_back({{"case", c}, {"reason", why}});
             return u;
           }()},
          {"variants", variants},
          {"summary",
           {{"mutants", m.mutants()},
            {"killed", m.killed()},
            {"kill_rate", m.kill_rate()},
            {"survivors", m.survivors()},
            {"weak_kills", m.weak_kills()},
            {"equivalents", m.equivalents()},
            {"false_rejects", m.false_rejects()},
            {"rejected_equivalents", m.rejected_equivalents()}}}};
}

const nlohmann::json& committed_kill_rates() {
  static const nlohmann::json j = [] {
    nlohmann::json f = nlohmann::json::parse(kKillRatesJson, nullptr, /*allow_exceptions=*/false);
    return f.is_object() && f.contains("suites") && f["suites"].is_object() ? f["suites"] : nlohmann::json::object();
  }();
  return j;
}

int cmd_mutants(const MutantsArgs& a, const std::string& command_line) {
  // Every option is checked before anything runs.
  check_option_range("mutants --threads", a.threads, 0, 4096);
  check_option_range("mutants --timeout", a.timeout, 0, 86400, true);
  set_num_threads(a.threads);
  const Candidate& base = require_candidate(a.base);
  check_option_range("mutants --seeds", a.seeds, 1, 1000);
  if (!a.only.empty() && a.only != "mutants" && a.only != "equivalents")
    throw InputError(fmt::format("mutants --only: '{}' is not one of mutants, equivalents", a.only));
  std::vector<Case> cases = expand_seeds(resolve_cases(a.suite, a.cases, "mutants"), a.seeds);
  Policy policy = a.policy.empty() ? default_policy() : read_policy(a.policy);
  MutantOptions opt;
  opt.tier = resolve_tier(a.tier, a.suite);
  opt.command = command_line;
  opt.wall_seconds = a.timeout;
  opt.worker_args = a.worker_args;
  if (a.threads > 0) opt.worker_args.insert(opt.worker_args.end(), {"--threads", std::to_string(a.threads)});
  opt.progress = progress_enabled();
  opt.only = a.only;
  for (const std::string& e : a.equivalents) opt.equivalents.push_back(&require_candidate(e));
  if (is_variant(base.info()) || is_canary(base.info()))
    throw InputError(fmt::format("mutants: the base {} is itself a {} candidate; give an honest base", base.name(),
                                 base.info().algorithm));
  if (std::none_of(cases.begin(), cases.end(), [&](const Case& c) { return c.op() == base.info().op; }))
    throw InputError(fmt::format("mutants: no case of op {}, the base's op", base.info().op));
  if (variants_of(base.info().op).empty() && opt.equivalents.empty())
    throw InputError(fmt::format("mutants: op {} has no built-in mutants yet", base.info().op));
  check_cases_fit_memory(cases, "mutants");
  if (!a.json.empty()) {
    check_output_file("mutants --json", a.json);
    lock_output("mutants --json", a.json);
  }
  KillMatrix m = run_mutants(base, cases, policy, opt);
  m.suite = a.suite;
  m.seeds = a.seeds;
  std::cout << kill_matrix_text(m);
  if (!a.json.empty()) {
    write_file_atomic(a.json, kill_matrix_json(m).dump(2) + "\n");
    std::cout << fmt::format("wrote {}\n", a.json);
  }
  return m.exit_code();
}

}  // namespace dg
