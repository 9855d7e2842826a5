// driftgate: the command line. Exit codes everywhere: 0 pass, 1 fail, 2 bad usage or bad input
// (the message names the problem), 3 internal harness error; gate adds 4 CANNOT_JUDGE and 5
// INCOMPLETE (harness/judge/gate.h).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <set>
#include <fstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "datasets/suites.h"
#include "harness/report/run_compare.h"
#include "harness/report/run_report.h"
#include "harness/core/progress.h"
#include "harness/cases/coverage.h"
#include "harness/cli/cli_gate.h"
#include "harness/core/digest.h"
#include "harness/cases/case_memory.h"
#include "harness/isolation/exec_candidate.h"
#include "harness/core/json_limits.h"
#include "harness/judge/mutants.h"
#include "harness/core/output_path.h"
#include "harness/isolation/plugin.h"
#include "harness/report/report.h"
#include "harness/core/safetensors.h"
#include "harness/isolation/sandbox.h"
#include "harness/core/threads.h"
#include "harness/timing/timing_worker.h"
#include "harness/judge/verify.h"
#include "harness/judge/merge.h"
#include "harness/isolation/worker_main.h"

namespace dg {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
  return s;
}

// The inputs stored in a .safetensors file for `verify --inputs` and `run --in`: every tensor but
// the reference values a file may also carry, which are not inputs and are dropped here: tensors
// named as the op's outputs (`driftgate export` writes o, ht, ... beside the inputs) and the
// "ref.*" and "out.*" tensors of a --save-failures file. Everything else must be exactly an input
// of the case (OpSpec::check_inputs refuses extra names, other dtypes and other shapes).
TensorMap stored_inputs(const OpSpec& op, const TensorMap& file) {
  TensorMap in;
  for (const auto& [name, t] : file) {
    bool reference = name.rfind("ref.", 0) == 0 || name.rfind("out.", 0) == 0;
    for (const TensorSpec& s : op.tensors)
      if (s.name == name && s.role == TensorRole::output) reference = true;
    if (!reference) in[name] = t;
  }
  return in;
}

// --- list ---------------------------------------------------------------------------------------
// "a, b, c" from a JSON array of strings.
std::string join_json(const nlohmann::json& a) {
  std::string out;
  for (const auto& x : a) out += (out.empty() ? "" : ", ") + x.get<std::string>();
  return out;
}

void list_ops(nlohmann::json& j, std::string& text) {
  for (const OpSpec* o : all_ops()) {
    nlohmann::json params = nlohmann::json::array();
    text += fmt::format("{:<12} {}\n", o->name, o->doc);
    for (const ParamSpec& p : o->params) {
      params.push_back({{"name", p.name}, {"default", p.default_value}, {"doc", p.doc}});
      text += fmt::format("    {:<8} = {:<12} {}\n", p.name, p.default_value.empty() ? "''" : p.default_value, p.doc);
    }
    j.push_back({{"name", o->name}, {"doc", o->doc}, {"params", params}});
  }
}

void list_candidates(nlohmann::json& j, std::string& text) {
  for (const Candidate* c : all_candidates()) {
    const CandidateInfo& i = c->info();
    j.push_back({{"name", i.name}, {"op", i.op}, {"backend", i.backend}, {"algorithm", i.algorithm},
                 {"input_dtype", name(i.input_dtype)}, {"state_dtype", name(i.state_dtype)},
                 {"output_dtype", name(i.output_dtype)}, {"doc", i.doc}});
    text += fmt::format("{:<28} {:<11} {:<5} in={:<5} state={:<5} out={:<5} {}\n", i.name, i.op, i.backend,
                        name(i.input_dtype), name(i.state_dtype), name(i.output_dtype), i.doc);
  }
}

void list_regimes(nlohmann::json& j, std::string& text) {
  for (const Regime* r : all_regimes()) {
    j.push_back({{"name", r->name}, {"op", r->op}, {"doc", r->doc}, {"defaults", r->defaults}});
    text += fmt::format("{:<18} {:<11} {}\n", r->name, r->op, r->doc);
  }
}

// A suite's last measured kill rate for people ("kill rate not measured" when there is none); when
// there is one it also goes into the suite's JSON row.
std::string kill_rate_text(const nlohmann::json& rates, const std::string& suite, nlohmann::json& row) {
  std::string kill = "kill rate not measured";
  if (rates.contains(suite) && rates[suite].is_object()) {
    const nlohmann::json& r = rates[suite];
    row["kill_rate"] = r;
    kill = fmt::format("kill rate {}/{}", r.value("killed", 0), r.value("mutants", 0));
    if (r.contains("survivors") && r["survivors"].is_array() && !r["survivors"].empty()) {
      std::string sv;
      for (const auto& x : r["survivors"]) sv += (sv.empty() ? "" : ", ") + x.get<std::string>();
      kill += "; survivors: " + sv;
    }
  }
  return kill;
}

// Which values of each op's axes the suite's cases exercise (harness/cases/coverage.h).
void list_suite_coverage(const Suite& s, nlohmann::json& row, std::string& text) {
  std::vector<Case> cases;
  for (const std::string& cs : s.cases) cases.push_back(parse_case(cs));
  row["coverage"] = suite_coverage_json(cases);
  for (const auto& [op, axes] : row["coverage"].items()) {
    text += fmt::format("  {}\n", op);
    for (const auto& a : axes) {
      std::string line = fmt::format("    {:<20} covered: {}", a["axis"].get<std::string>(),
                                     a["covered"].empty() ? std::string("-") : join_json(a["covered"]));
      if (!a["missing"].empty()) line += "; MISSING: " + join_json(a["missing"]);
      text += line + "\n";
    }
  }
}

// With each suite's last measured kill rate (datasets/kill_rates.json; driftgate mutants).
void list_suites(nlohmann::json& j, std::string& text, bool coverage) {
  const nlohmann::json& rates = committed_kill_rates();
  for (const Suite& s : all_suites()) {
    nlohmann::json row = {{"name", s.name}, {"doc", s.doc}, {"cases", s.cases}};
    const std::string kill = kill_rate_text(rates, s.name, row);
    text += fmt::format("{:<12} {} ({} cases; {})\n", s.name, s.doc, s.cases.size(), kill);
    if (coverage) list_suite_coverage(s, row, text);
    j.push_back(row);
  }
}

int cmd_list(const std::string& what, bool json, bool coverage) {
  nlohmann::json j = nlohmann::json::array();
  std::string text;
  if (what == "ops")
    list_ops(j, text);
  else if (what == "candidates")
    list_candidates(j, text);
  else if (what == "regimes")
    list_regimes(j, text);
  else if (what == "suites")
    list_suites(j, text, coverage);
  else
    throw InputError(fmt::format("list: unknown kind '{}' (ops, candidates, regimes, suites)", what));
  std::cout << (json ? j.dump(2) + "\n" : text);
  return 0;
}

// --- verify -------------------------------------------------------------------------------------
struct VerifyArgs {
  std::string candidates, case_str, suite, tier, inputs, json, save_failures, shard;
  bool certify = false, in_process = false, resume = false;
  int threads = 0, runs = 1;
  double min_bits = -1, timeout = 600;
  bool min_bits_given = false;
};

// verify's options, each argument checked against its range first.
VerifyOptions verify_options(const VerifyArgs& a) {
  check_option_range("verify --runs", a.runs, 1, 100);
  check_option_range("verify --threads", a.threads, 0, 4096);
  check_option_range("verify --timeout", a.timeout, 0, 86400, true);
  if (a.min_bits_given) check_option_range("verify --min-bits", a.min_bits, 0, 64);
  VerifyOptions opt;
  opt.tier = resolve_tier(a.tier, a.suite);
  opt.certify = a.certify;
  opt.save_failures_dir = a.save_failures;
  if (a.min_bits >= 0) opt.min_bits = a.min_bits;
  opt.isolate = !a.in_process;
  opt.worker_runs = a.runs;
  opt.wall_seconds = a.timeout;
  opt.worker_args = outside_candidate_args();
  if (a.threads > 0) opt.worker_args.insert(opt.worker_args.end(), {"--threads", std::to_string(a.threads)});
  return opt;
}

// The candidates --candidate names (empty: every case's default set); with --in-process, none of
// those verified may be a plugin's.
std::vector<const Candidate*> verify_candidates(const VerifyArgs& a) {
  std::vector<const Candidate*> cands;
  for (const std::string& n : split(a.candidates, ',')) cands.push_back(&require_candidate(n));
  if (a.in_process)
    for (const Candidate* k : cands.empty() ? all_candidates() : cands)
      if (is_plugin_proxy(*k) && (!cands.empty() || in_default_set(k->info())))
        throw InputError(fmt::format("verify --in-process: {} is a plugin candidate, and plugin code runs only in "
                                     "worker processes; drop --in-process",
                                     k->name()));
  return cands;
}

// --inputs: the stored inputs of the one case, checked against it.
std::optional<TensorMap> verify_stored_inputs(const VerifyArgs& a, const std::vector<Case>& cases) {
  if (a.inputs.empty()) return std::nullopt;
  if (cases.size() != 1) throw InputError("verify: --inputs needs --case");
  const OpSpec& op = *find_op(cases[0].op());
  std::optional<TensorMap> stored = stored_inputs(op, read_safetensors(a.inputs).tensors);
  op.check_inputs(cases[0], *stored);
  return stored;
}

// What a resumed run must match: options, cases, inputs, the binary and the outside candidates.
// Written into --json with a digest over it and the rows, so a file edited by hand, or written by
// another command, is refused instead of resumed.
nlohmann::json verify_resume_key(const VerifyArgs& a, const VerifyOptions& opt, const std::vector<Case>& cases) {
  nlohmann::json case_list = nlohmann::json::array();
  for (const Case& c : cases) case_list.push_back(c.str());
  return {{"kind", "verify"},
          {"candidates", a.candidates},
          {"cases", case_list},
          {"tier", tier_name(opt.tier)},
          {"certify", opt.certify},
          {"min_bits", opt.min_bits ? nlohmann::json(*opt.min_bits) : nlohmann::json(nullptr)},
          {"isolate", opt.isolate},
          {"runs", opt.worker_runs},
          {"timeout", opt.wall_seconds},
          {"threads", a.threads},
          {"inputs", a.inputs.empty() ? std::string() : file_sha256(a.inputs)},
          {"binary_sha256", self_exe_sha256()},
          {"outside", outside_json(opt.worker_args)}};
}

// --resume: rows of a previous, interrupted run of the same command are kept, their cases skipped.
struct PriorRows {
  nlohmann::json rows = nlohmann::json::array();
  std::set<std::pair<std::string, std::string>> done;   // (case, candidate)
  int failed = 0;
};

// The --json file of the run to resume, refused unless this run's key and its own digest match.
nlohmann::json read_resumable(const std::string& path, const nlohmann::json& resume_key) {
  nlohmann::json old;
  try {
    old = parse_json_bounded(read_regular_file("verify --resume", path, size_t{1} << 30));
  } catch (const std::exception& e) {
    throw InputError(fmt::format("--resume: {} is not a driftgate verify JSON file ({})", path, e.what()));
  }
  if (!old.is_object() || !old.contains("records"))
    throw InputError(fmt::format("--resume: {} is not a driftgate verify JSON file (no records)", path));
  if (std::string d = resume_key_difference(old.value("resume_key", nlohmann::json()), resume_key); !d.empty())
    throw InputError(fmt::format("--resume: {} was written by another run: {}", path, d));
  if (old.value("rows_digest", "") != verify_rows_digest(old.at("records"), old.at("resume_key")))
    throw InputError(fmt::format("--resume: {} cannot be resumed: its records do not match its rows_digest "
                                 "(edited after driftgate wrote them)",
                                 path));
  return old;
}

PriorRows read_prior_rows(const VerifyArgs& a, const nlohmann::json& resume_key) {
  PriorRows prior;
  if (!a.resume) return prior;
  if (a.json.empty()) throw InputError("verify: --resume needs --json FILE (the results to resume)");
  if (!std::filesystem::exists(a.json)) return prior;
  const nlohmann::json old = read_resumable(a.json, resume_key);
  try {
    for (const auto& r : old.at("records")) {
      prior.done.insert({r.at("case").get<std::string>(), r.at("candidate").get<std::string>()});
      std::string d = r.at("disposition");
      prior.failed += d == "INCORRECT" || d == "ERRORED" || d == "INVALID";
      prior.rows.push_back(r);
    }
  } catch (const std::exception& e) {
    throw InputError(fmt::format("--resume: {} is not a driftgate verify JSON file ({})", a.json, e.what()));
  }
  return prior;
}

// --json: the resumed rows, then this run's, with the resume key and the digest over both, and a
// shard's record (harness/judge/merge.h) when sharded.
void write_verify_json(const std::string& path, const std::vector<Record>& records, const std::string& cmdline,
                       const PriorRows& prior, const nlohmann::json& resume_key, const nlohmann::json& shard) {
  nlohmann::json j = records_json(records, cmdline);
  nlohmann::json rows = prior.rows;
  for (auto& r : j["records"]) rows.push_back(r);
  j["records"] = rows;
  j["resume_key"] = resume_key;
  j["rows_digest"] = verify_rows_digest(rows, resume_key);
  if (!shard.is_null()) j["shard"] = shard;
  write_file_atomic(path, j.dump(2) + "\n");
}

// The candidates verified on case c: those named, else the op's default set; less the rows resumed.
std::vector<const Candidate*> candidates_for_case(const Case& c, const std::vector<const Candidate*>& cands,
                                                  const PriorRows& prior) {
  std::vector<const Candidate*> mine;
  for (const Candidate* k : cands.empty() ? all_candidates() : cands)
    if (k->info().op == c.op() && (!cands.empty() || in_default_set(k->info())) && !prior.done.count({c.str(), k->name()}))
      mine.push_back(k);
  return mine;
}

// Every case's rows; `saved` is called with the rows so far after each case.
std::vector<Record> verify_cases(const std::vector<Case>& cases, const std::vector<const Candidate*>& cands,
                                 const VerifyOptions& opt, const TensorMap* stored, const PriorRows& prior,
                                 const std::function<void(const std::vector<Record>&)>& saved) {
  std::vector<Record> records;
  Progress progress(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    std::vector<const Candidate*> mine = candidates_for_case(c, cands, prior);
    if (mine.empty()) continue;
    progress.begin(i, c.str());
    std::vector<Record> rows = verify_case(c, mine, opt, stored);
    records.insert(records.end(), rows.begin(), rows.end());
    saved(records);
    int bad = 0;
    for (const Record& r : rows) bad += r.disposition != Disposition::PASSED && r.disposition != Disposition::SKIPPED;
    progress.end(i, c.str(), bad ? fmt::format("{} of {} rows not PASSED", bad, rows.size()) : "PASSED");
  }
  return records;
}

// The drift table and the counts, resumed rows included; 1 when a row failed.
int print_verify_summary(const std::vector<Record>& records, const PriorRows& prior, const std::string& json_path) {
  std::cout << drift_table(records);
  int failed = 0, passed = 0;
  for (const Record& r : records) {
    if (r.disposition == Disposition::PASSED) ++passed;
    if (r.disposition == Disposition::INCORRECT || r.disposition == Disposition::ERRORED ||
        r.disposition == Disposition::INVALID)
      ++failed;
  }
  if (!prior.rows.empty())
    std::cout << fmt::format("{} rows resumed from {} ({} of them failed)\n", prior.rows.size(), json_path, prior.failed);
  failed += prior.failed;
  std::cout << fmt::format("{} passed, {} failed, {} rows\n", passed, failed, records.size() + prior.rows.size());
  return failed ? 1 : 0;
}

int cmd_verify(const VerifyArgs& a, const std::string& cmdline) {
  const VerifyOptions opt = verify_options(a);
  set_num_threads(a.threads);

  // Everything that can be wrong with the input is checked before anything is measured.
  std::vector<Case> cases =
      resolve_cases(a.suite, a.case_str.empty() ? std::vector<std::string>{} : std::vector<std::string>{a.case_str}, "verify");
  // A shard's key is the whole run's (every case) plus its shard; it runs its own cases only.
  const std::optional<Shard> shard = resolve_shard(a.shard, "verify");
  nlohmann::json resume_key = verify_resume_key(a, opt, cases);
  nlohmann::json shard_rec;
  if (shard) {
    if (a.json.empty()) throw InputError("verify --shard: give --json FILE, the shard's results for driftgate merge");
    cases = shard_cases(cases, *shard);
    resume_key = shard_key(resume_key, *shard);
    shard_rec = shard_record(*shard, cases.size());
    std::cerr << fmt::format("verify: shard {}: {} of the run's {} cases\n", shard->text(), cases.size(),
                             resume_key["cases"].size());
  }
  const std::vector<const Candidate*> cands = verify_candidates(a);
  const std::optional<TensorMap> stored = verify_stored_inputs(a, cases);
  check_cases_fit_memory(cases, "verify");
  if (!a.json.empty()) check_output_file("verify --json", a.json);
  if (!a.save_failures.empty()) check_output_dir("verify --save-failures", a.save_failures);
  if (!a.json.empty()) lock_output("verify --json", a.json);   // held until this run ends

  const PriorRows prior = read_prior_rows(a, resume_key);
  // Rows already measured are on disk before the next case starts.
  auto saved = [&](const std::vector<Record>& records) {
    if (!a.json.empty()) write_verify_json(a.json, records, cmdline, prior, resume_key, shard_rec);
  };
  const std::vector<Record> records = verify_cases(cases, cands, opt, stored ? &*stored : nullptr, prior, saved);
  saved(records);   // a run with no case to measure (an empty shard, a resume with nothing left) writes its file too
  return print_verify_summary(records, prior, a.json);
}

// --- report ----------------------------------------------------------------------------------------
// Every file is read and checked before anything is written.
int cmd_report(const std::vector<std::string>& files, const std::string& out) {
  check_output_dir("report --out", out, {"report.html", "report.md"});
  std::vector<RunFile> runs;
  for (const std::string& f : files) runs.push_back(read_run_file(f));
  const RenderedReport r = render_report(runs);
  std::filesystem::create_directories(out);
  write_file_atomic(out + "/report.md", r.markdown);
  write_file_atomic(out + "/report.html", r.html);
  std::cout << fmt::format("wrote {0}/report.html and {0}/report.md from {1} run{2}\n", out, runs.size(), runs.size() == 1 ? "" : "s");
  return 0;
}

// --- compare ---------------------------------------------------------------------------------------
int cmd_compare(const std::vector<std::string>& files, const std::string& out, const std::string& json_path) {
  if (!out.empty()) check_output_dir("compare --out", out, {"compare.md", "compare.json", "report.html"});
  if (!json_path.empty()) check_output_file("compare --json", json_path);
  const RunFile a = read_run_file(files.at(0)), b = read_run_file(files.at(1));
  const Comparison c = compare_runs(a, b);
  std::cout << c.markdown;
  const std::string text = c.json.dump(2) + "\n";
  if (!out.empty()) {
    std::filesystem::create_directories(out);
    write_file_atomic(out + "/compare.md", c.markdown);
    write_file_atomic(out + "/report.html", c.html);
    write_file_atomic(out + "/compare.json", text);
  }
  if (!json_path.empty()) write_file_atomic(json_path, text);
  return c.regressions > 0 ? 1 : 0;
}

// --- export / run -------------------------------------------------------------------------------
int cmd_export(const std::string& case_str, const std::string& tier_s, const std::string& out, bool certify) {
  Case c = parse_case(case_str);
  Tier tier = resolve_tier(tier_s, "");
  const OpSpec* op = find_op(c.op());
  check_cases_fit_memory({c}, "export");
  check_output_file("export --out", out);
  TensorMap in = generate_inputs(c);
  op->check_inputs(c, in);
  RefOutputs ref = op->reference(c, in, tier, -1);
  std::map<std::string, std::string> meta = {{"case", c.str()}, {"tier", std::string(tier_name(tier))},
                                             {"producer", "driftgate export"}};
  // ref_bits: agreement with the next tier up over the whole case when asked, else the tier's
  // nominal precision.
  if (certify) {
    Certification ce = op->certify(c, in, tier);
    meta["ref_bits"] = fmt::format("{:.1f}", ce.ref_bits);
    meta["ref_bits_kind"] = fmt::format("agreement with {} on {}", tier_name(ce.against), ce.sample);
  } else {
    meta["ref_bits"] = fmt::format("{}", tier_precision(tier));
    meta["ref_bits_kind"] = "the tier's precision (not measured; pass --certify)";
  }
  TensorMap all = in;
  auto shapes = op->output_shapes(c);
  for (const auto& [name, values] : ref) {
    Tensor t(DType::f64, shapes.at(name));
    std::copy(values.begin(), values.end(), t.data<double>());
    all[name] = t;
  }
  write_safetensors(out, all, meta);
  std::cout << fmt::format("wrote {} ({} tensors, tier {}, ref_bits {})\n", out, all.size(), tier_name(tier), meta["ref_bits"]);
  return 0;
}

int cmd_run(const std::string& cand_name, const std::string& in_path, const std::string& out_path,
            const std::string& case_arg) {
  const Candidate& cand = require_candidate(cand_name);
  check_output_file("run --out", out_path);
  SafetensorsFile f = read_safetensors(in_path);
  std::string cs = !case_arg.empty() ? case_arg : (f.metadata.count("case") ? f.metadata.at("case") : "");
  if (cs.empty()) throw InputError(fmt::format("{}: no 'case' in __metadata__; pass --case", in_path));
  Case c = parse_case(cs);
  if (cand.info().op != c.op())
    throw InputError(fmt::format("candidate {} implements {}, but the case is {}", cand.name(), cand.info().op, c.op()));
  const OpSpec* op = find_op(c.op());
  TensorMap in = stored_inputs(*op, f.tensors);
  op->check_inputs(c, in);
  check_cases_fit_memory({c}, "run");
  TensorMap out = run_candidate(cand, c, in);
  write_safetensors(out_path, out, {{"case", c.str()}, {"candidate", cand.name()}});
  std::cout << fmt::format("wrote {} ({} outputs of {})\n", out_path, out.size(), cand.name());
  return 0;
}

// --- the command line ---------------------------------------------------------------------------

struct ListArgs {
  std::string what;
  bool json = false, coverage = false;
};
struct ExportArgs {
  std::string case_str, tier = "dd", out;
  bool certify = false;
};
struct RunArgs {
  std::string candidate, in, out, case_str;
};
struct ReportArgs {
  std::vector<std::string> files;
  std::string out;
};
struct CompareArgs {
  std::vector<std::string> files;
  std::string out, json;
};
struct MergeArgs {
  std::vector<std::string> files;
  std::string out;
};
struct GlobalArgs {
  std::vector<std::string> plugin_paths, exec_args;
  bool quiet = false, progress_on = false;
};

// Everything the command line binds.
struct CliArgs {
  ListArgs list;
  VerifyArgs verify;
  ExportArgs exp;
  RunArgs run;
  MutantsArgs mutants;
  ReportArgs report;
  CompareArgs compare;
  MergeArgs merge;
  WorkerArgs worker;
  TimingRequest timing;        // bench-worker
  std::string timing_report;   // bench-worker --report
  int worker_threads = 0;      // worker and bench-worker --threads
  std::string plugin_library, plugin_report;
  GlobalArgs global;
};

// The verbs, each set when it was given.
struct Verbs {
  CLI::App *list, *verify, *exp, *run, *mutants, *report, *compare, *merge, *worker, *bench_worker, *plugin_list;
};

CLI::App* add_list(CLI::App& app, ListArgs& a) {
  CLI::App* list = app.add_subcommand("list", "list ops, candidates, regimes or suites");
  list->add_option("what", a.what, "ops | candidates | regimes | suites")->required();
  list->add_flag("--json", a.json, "print JSON");
  list->add_flag("--coverage", a.coverage, "suites: which values of each op's axes the cases exercise");
  return list;
}

CLI::App* add_verify(CLI::App& app, VerifyArgs& va) {
  CLI::App* verify = app.add_subcommand("verify", "precision drift of candidates against the reference");
  verify->add_option("--candidate", va.candidates, "comma-separated candidates (default: every candidate of the op but the canaries and mutants)");
  verify->add_option("--case", va.case_str, "one case string, e.g. 'kda(T=4096,H=1,K=128,V=128,regime=long_memory,dtype=bf16,seed=0)'");
  verify->add_option("--suite", va.suite, "a named suite (driftgate list suites)");
  verify->add_option("--ref-tier", va.tier, "reference tier: f64, dd, mpfr127, mpfr256, f128 (default: the suite's, else dd)");
  verify->add_flag("--certify", va.certify, "recompute the reference at the next tier up (on a sample when costly) and report ref_bits");
  verify->add_option("--inputs", va.inputs, "read the inputs from a .safetensors file instead of generating them");
  verify->add_option("--json", va.json, "write versioned JSON records here (rewritten after every case)");
  verify->add_option("--save-failures", va.save_failures, "write inputs, reference and outputs of every failing row here");
  verify->add_option("--threads", va.threads, "worker threads (default: all cores)");
  verify->add_option("--min-bits", va.min_bits, "override the verify floor (bits of the output format)");
  verify->add_flag("--resume", va.resume, "keep the rows of an interrupted run in --json FILE and measure only the rest");
  verify->add_flag("--in-process", va.in_process, "run candidates in this process instead of isolated workers (faster, unsafe)");
  verify->add_option("--runs", va.runs, "check runs per candidate in its worker (2 adds the determinism rule)")->capture_default_str();
  verify->add_option("--timeout", va.timeout, "wall-clock limit per candidate run, seconds")->capture_default_str();
  verify->add_option("--shard", va.shard, kShardHelp);
  return verify;
}

CLI::App* add_export(CLI::App& app, ExportArgs& a) {
  CLI::App* exp = app.add_subcommand("export", "write a case's inputs and reference outputs as .safetensors");
  exp->add_option("--case", a.case_str, "case string")->required();
  exp->add_option("--ref-tier", a.tier, "reference tier")->capture_default_str();
  exp->add_option("--out", a.out, "output .safetensors file")->required();
  exp->add_flag("--certify", a.certify, "measure ref_bits against the next tier up (on a sample when costly)");
  return exp;
}

CLI::App* add_run(CLI::App& app, RunArgs& a) {
  CLI::App* run = app.add_subcommand("run", "run a candidate on stored inputs");
  run->add_option("--candidate", a.candidate, "candidate")->required();
  run->add_option("--in", a.in, "input .safetensors (case in __metadata__ unless --case)")->required();
  run->add_option("--out", a.out, "output .safetensors")->required();
  run->add_option("--case", a.case_str, "case string (overrides the file's)");
  return run;
}

CLI::App* add_mutants(CLI::App& app, MutantsArgs& ma) {
  CLI::App* mutants = app.add_subcommand("mutants", "how strong a suite is: every built-in mutant of the base's op must be "
                                                    "rejected, every equivalent variant merged (gate precision rules)");
  mutants->add_option("--base", ma.base, "the honest candidate the variants are judged against")->required();
  mutants->add_option("--suite", ma.suite, "a named suite (driftgate list suites)");
  mutants->add_option("--case", ma.cases, "a case string (repeatable)");
  mutants->add_option("--json", ma.json, "write the kill matrix as versioned JSON here");
  mutants->add_option("--seeds", ma.seeds, "judge every case at its seed and the N - 1 seeds after it (false rejects across seeds)")
      ->capture_default_str();
  mutants->add_option("--equivalent", ma.equivalents,
                      "an honest candidate of the op judged as one more equivalent variant (repeatable): it must MERGE everywhere");
  mutants->add_option("--only", ma.only, "run only the mutants or only the equivalent variants (mutants|equivalents)");
  mutants->add_option("--policy", ma.policy, "a policy TOML file (default: policies/default.toml, built in)");
  mutants->add_option("--ref-tier", ma.tier, "reference tier (default: the suite's, else dd)");
  mutants->add_option("--threads", ma.threads, "worker threads (default: all cores)");
  mutants->add_option("--timeout", ma.timeout, "wall-clock limit per candidate worker run, seconds")->capture_default_str();
  return mutants;
}

// report: one page for people from the JSON of runs (harness/report/run_report.h).
CLI::App* add_report(CLI::App& app, ReportArgs& a) {
  CLI::App* report = app.add_subcommand("report", "an HTML and Markdown report (plots, tables, provenance) from verify, "
                                                  "bench and gate JSON files");
  report->add_option("files", a.files, "verify --json, bench --json or gate verdict.json files")->required();
  report->add_option("--out", a.out, "the folder for report.html and report.md")->required();
  return report;
}

// compare: two runs of the same kind, row by row (harness/report/run_compare.h).
CLI::App* add_compare(CLI::App& app, CompareArgs& a) {
  CLI::App* compare = app.add_subcommand("compare", "two runs of the same kind (two releases, two machines, before and "
                                                    "after a patch), row by row: bits, speed with an interval, a verdict");
  compare->add_option("files", a.files, "A.json B.json: verify --json, bench --json or gate verdict.json files")
      ->required()
      ->expected(2);
  compare->add_option("--out", a.out, "also write compare.md, compare.json and report.html here");
  compare->add_option("--json", a.json, "write the comparison as JSON");
  return compare;
}

// merge: the shards of one sharded run into the file the unsharded run writes (harness/judge/merge.h).
CLI::App* add_merge(CLI::App& app, MergeArgs& a) {
  CLI::App* merge = app.add_subcommand("merge", "combine the results files of the shards of one run (verify, bench or gate "
                                                "--shard i/n) into the file one unsharded run writes");
  merge->add_option("files", a.files, "every shard's file: verify --json, bench --json or gate verdict.json")->required();
  merge->add_option("--out", a.out, "the merged file (a gate's verdict.md and junit.xml go beside it)")->required();
  return merge;
}

int cmd_merge(const MergeArgs& a, const std::string& cmdline) {
  const MergeOutcome o = merge_shard_files(a.files, a.out, cmdline);
  std::cout << o.text;
  return o.exit_code;
}

// worker: hidden; the parent side of candidate isolation (harness/isolation/worker.h) spawns it. Options it
// does not know fall through to the top level (e.g. --plugin).
CLI::App* add_worker(CLI::App& app, WorkerArgs& wk, int& worker_threads) {
  CLI::App* worker = app.add_subcommand("worker", "run one candidate in an isolated worker")->group("");
  worker->fallthrough();
  worker->add_option("--candidate", wk.candidate)->required();
  worker->add_option("--in", wk.in);
  worker->add_option("--in-fd", wk.in_fd);
  worker->add_option("--out", wk.out)->required();
  worker->add_option("--report", wk.report)->required();
  worker->add_option("--mem-limit", wk.mem_limit);
  worker->add_option("--cpu-limit", wk.cpu_limit);
  worker->add_option("--runs", wk.runs);
  worker->add_option("--threads", worker_threads);
  return worker;
}

// bench-worker: hidden; timing in a process of its own (harness/timing/timing_worker.h).
CLI::App* add_bench_worker(CLI::App& app, TimingRequest& tr, std::string& tr_report, int& worker_threads) {
  CLI::App* bench_worker = app.add_subcommand("bench-worker", "time candidates in an isolated worker")->group("");
  bench_worker->add_option("--candidate", tr.candidates)->required();
  bench_worker->add_option("--case", tr.case_str)->required();
  bench_worker->add_option("--max-time", tr.max_time_s);
  bench_worker->add_option("--min-reps", tr.min_repetitions);
  bench_worker->add_option("--max-reps", tr.max_repetitions);
  bench_worker->add_option("--confidence", tr.confidence);
  bench_worker->add_option("--target-halfwidth", tr.target_halfwidth);
  bench_worker->add_option("--interim-confidence", tr.interim_confidence);
  bench_worker->add_option("--min-effect", tr.min_effect);
  bench_worker->add_option("--report", tr_report)->required();
  bench_worker->add_option("--threads", worker_threads);
  bench_worker->add_flag("--channel", tr.channel);
  bench_worker->add_option("--cpus", tr.cpus);
  return bench_worker;
}

// plugin-list: hidden; lists a plugin's candidates in a worker (harness/isolation/plugin.h).
CLI::App* add_plugin_list(CLI::App& app, std::string& pl_library, std::string& pl_report) {
  CLI::App* plugin_list = app.add_subcommand("plugin-list", "list a plugin's candidates in a worker")->group("");
  plugin_list->add_option("--library", pl_library)->required();
  plugin_list->add_option("--report", pl_report)->required();
  return plugin_list;
}

// Plugins and outside programs add candidates before any verb runs. Global options, also
// accepted after the verb (every subcommand falls through to them); one value per occurrence.
void add_global_options(CLI::App& app, GlobalArgs& g) {
  app.add_flag("--quiet", g.quiet, "no progress lines on stderr (default: printed when stderr is a terminal)");
  app.add_flag("--progress", g.progress_on, "progress lines on stderr even when it is not a terminal");
  app.add_option("--plugin", g.plugin_paths, "load candidates from a shared library (driftgate/candidate_abi.h); repeatable")
      ->allow_extra_args(false);
  app.add_option("--exec", g.exec_args, "NAME='CMD {in} {out}': an outside program as candidate NAME; repeatable")
      ->allow_extra_args(false);
}

// After parsing, before any verb: progress lines, the temporary folder, and the sandbox
// relaxations the environment asks for.
void apply_global_options(const GlobalArgs& g) {
  if (g.quiet && g.progress_on) throw InputError("--quiet and --progress contradict each other");
  set_progress_mode(g.quiet ? ProgressMode::off : g.progress_on ? ProgressMode::on : ProgressMode::automatic);
  check_tmpdir();
  for (const char* var : {"DRIFTGATE_SANDBOX_DISABLE", "DRIFTGATE_DEVICE_SANDBOX_DISABLE"})
    if (const char* v = std::getenv(var)) {
      try {
        sandbox_relax_from_text(var, v);
      } catch (const std::exception& e) {
        throw InputError(e.what());
      }
    }
}

// A timing worker granted fewer cores than the machine has pins itself before any candidate
// code is loaded (harness/timing/timing_worker.h).
void pin_timing_worker(const std::string& cpu_list) {
  std::vector<int> cpus;
  try {
    cpus = parse_cpu_list(cpu_list);
  } catch (const std::exception& e) {
    throw InputError(fmt::format("bench-worker --cpus: {}", e.what()));
  }
  if (!pin_to_cpus(0, cpus)) throw std::runtime_error("bench-worker: cannot pin to CPUs " + cpu_list);
}

// Plugin code runs only in candidate processes: the workers, and `run` (which holds no
// reference). Every other verb lists a plugin's candidates in a worker and registers proxies.
void add_outside_candidates(const GlobalArgs& g, bool candidate_process) {
  for (const std::string& p : g.plugin_paths) {
    if (candidate_process)
      load_plugin(p);
    else
      list_plugin_in_worker(p);
  }
  for (const std::string& e : g.exec_args) register_exec(e);
}

// Runs the verb given (plugin-list has run already); 2 when none ran.
int run_verb(const Verbs& v, CliArgs& a, GateCommands& gate_cmds, const std::string& cmd) {
  if (*v.list) return cmd_list(a.list.what, a.list.json, a.list.coverage);
  if (*v.verify) return cmd_verify(a.verify, cmd);
  if (*v.exp) return cmd_export(a.exp.case_str, a.exp.tier, a.exp.out, a.exp.certify);
  if (*v.run) return cmd_run(a.run.candidate, a.run.in, a.run.out, a.run.case_str);
  if (*v.report) return cmd_report(a.report.files, a.report.out);
  if (*v.compare) return cmd_compare(a.compare.files, a.compare.out, a.compare.json);
  if (*v.merge) return cmd_merge(a.merge, cmd);
  if (*v.mutants) {
    a.mutants.worker_args = outside_candidate_args();
    return cmd_mutants(a.mutants, cmd);
  }
  if (int rc = run_gate_commands(gate_cmds, cmd); rc >= 0) return rc;
  if (*v.worker) {
    set_num_threads(a.worker_threads);
    return worker_main(a.worker);
  }
  if (*v.bench_worker) {
    set_num_threads(a.worker_threads);
    return timing_worker_main(a.timing, a.timing_report);
  }
  return 2;
}

int run_main(int argc, char** argv) {
  CLI::App app{"driftgate: numerical verification and benchmarking of LLM inference kernels"};
  app.require_subcommand(1);
  CliArgs a;
  Verbs v;
  v.list = add_list(app, a.list);
  v.verify = add_verify(app, a.verify);
  v.exp = add_export(app, a.exp);
  v.run = add_run(app, a.run);
  v.mutants = add_mutants(app, a.mutants);
  v.report = add_report(app, a.report);
  v.compare = add_compare(app, a.compare);
  v.merge = add_merge(app, a.merge);
  v.worker = add_worker(app, a.worker, a.worker_threads);
  v.bench_worker = add_bench_worker(app, a.timing, a.timing_report, a.worker_threads);
  v.plugin_list = add_plugin_list(app, a.plugin_library, a.plugin_report);
  add_global_options(app, a.global);
  std::shared_ptr<GateCommands> gate_cmds = add_gate_commands(app);
  for (CLI::App* sub : app.get_subcommands({})) sub->fallthrough();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  a.verify.min_bits_given = v.verify->get_option("--min-bits")->count() > 0;
  apply_global_options(a.global);
  if (*v.plugin_list) return plugin_list_main(a.plugin_library, a.plugin_report);
  if (*v.bench_worker && !a.timing.cpus.empty()) pin_timing_worker(a.timing.cpus);
  add_outside_candidates(a.global, *v.worker || *v.bench_worker || *v.run);
  return run_verb(v, a, *gate_cmds, command_line(argc, argv));
}

}  // namespace
}  // namespace dg

int main(int argc, char** argv) {
  // The sandbox's init (harness/isolation/sandbox.h) runs before anything else; the workers inside it neither
  // sweep nor clean up (their parent does).
  const std::string verb = argc > 1 ? argv[1] : "";
  if (verb == "sandbox-init") return dg::sandbox_init_main(argc, argv);
  if (verb != "worker" && verb != "bench-worker") {
    dg::install_signal_cleanup();
    dg::sweep_stale_temp_dirs();
  }
  try {
    return dg::run_main(argc, argv);
  } catch (const dg::InputError& e) {
    std::cerr << "driftgate: error: " << e.what() << "\n";
    return 2;
  } catch (const dg::SafetensorsError& e) {
    std::cerr << "driftgate: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "driftgate: internal error: " << e.what() << "\n";
    return 3;
  }
}
