#include "harness/core/progress.h"
#include "harness/cli/cli_gate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "datasets/suites.h"
#include "harness/core/digest.h"
#include "harness/cases/case_memory.h"
#include "harness/isolation/exec_candidate.h"
#include "harness/core/json_limits.h"
#include "harness/core/output_path.h"
#include "harness/judge/gate_run.h"
#include "harness/judge/merge.h"
#include "harness/report/report.h"
#include "harness/timing/speed.h"
#include "harness/metrics/stats.h"
#include "harness/core/threads.h"
#include "harness/timing/timing_worker.h"

namespace dg {

struct GateCommands {
  // gate
  CLI::App* gate = nullptr;
  std::string base, baseline, patch, suite, policy, out, tier, save_failures, shard;
  std::vector<std::string> cases;
  double claim = std::numeric_limits<double>::quiet_NaN();
  double timeout = 600;
  bool no_time = false, resume = false;
  int threads = 0;
  // bench
  CLI::App* bench = nullptr;
  std::string b_candidates, b_case, b_suite, b_json, b_tier, b_shard;
  double b_max_time = 10;
  // selftest
  CLI::App* selftest = nullptr;
  std::string s_suite = "kda-gate-quick", s_base = "kda_cpu_recurrent_f32";
  double s_timeout = 10;
  // calibrate
  CLI::App* calibrate = nullptr;
  std::string c_candidate, c_case = "kda(T=4096,H=2,K=128,V=128,regime=kimi_linear,dtype=bf16,seed=0)";
  int c_trials = 20;
  double c_slowdown = 0.05, c_max_time = 20;   // unless given: the policy's max_time_s
  // machine
  CLI::App* machine = nullptr;
  bool m_json = false, m_remeasure = false;
  std::string machine_file = "results/machine.json";
};

namespace {

// Every policy value that can change a verdict, for the resume key (a policy file's path can stay
// while its contents change).
nlohmann::json policy_json(const Policy& p) {
  return {{"slack", p.slack}, {"naive_factor", p.naive_factor}, {"floor_ulps", p.floor_ulps}, {"tail_factor", p.tail_factor}, {"metrics", p.metrics},
          {"drift_margin", p.drift_margin}, {"drift_min_positions", p.drift_min_positions}, {"min_bits", p.min_bits},
          {"naive", p.naive}, {"confidence", p.confidence}, {"min_effect", p.min_effect}, {"max_time_s", p.max_time_s},
          {"target_halfwidth", p.target_halfwidth}, {"interim_confidence", p.interim_confidence},
          {"claim_tolerance", p.claim_tolerance},
          {"not_supported", p.not_supported}};
}

// gate --baseline: a stored verdict, read once: its patch's record of each case (the rows checked
// for integrity by their rows digest), its resume key and where it came from.
struct StoredBaseline {
  std::map<std::string, Record> rows;
  nlohmann::json key;          // its resume_key
  nlohmann::json provenance;   // GateReport::baseline
  std::string patch;           // the patch it judged: the base now
};

StoredBaseline read_baseline(const std::string& path) {
  const std::string text = read_regular_file("gate --baseline", path, size_t{1} << 30);
  StoredBaseline b;
  nlohmann::json head;
  try {
    head = parse_json_bounded(text);
    for (const GateRow& r : gate_rows_from_json(text)) b.rows[r.case_str] = r.patch;
  } catch (const std::exception& e) {
    throw InputError(fmt::format("gate --baseline: {} is not a driftgate verdict whose rows can be read ({})", path, e.what()));
  }
  b.patch = head.value("patch", "");
  if (b.patch.empty()) throw InputError(fmt::format("gate --baseline: {} names no patch (not a gate's verdict.json)", path));
  b.key = head.value("resume_key", nlohmann::json());
  b.provenance = {{"path", std::filesystem::absolute(path).string()}, {"sha256", sha256_hex(text)},
                  {"run_id", head.value("run_id", "")},         {"rows_digest", head.value("rows_digest", "")},
                  {"patch", b.patch},                           {"finished_at", head.value("finished_at", "")},
                  {"context", head.value("context", nlohmann::json::object())}};
  return b;
}

// The same reference tier, policy and case list as this run, and a row of every case.
void check_baseline(const StoredBaseline& b, const std::string& path, const std::vector<Case>& cases, Tier tier,
                    const Policy& policy) {
  nlohmann::json case_list = nlohmann::json::array();
  for (const Case& c : cases) case_list.push_back(c.str());
  for (const auto& [k, what, now] : {std::tuple<const char*, const char*, nlohmann::json>{"tier", "reference tier", tier_name(tier)},
                                     {"policy", "policy", policy_json(policy)},
                                     {"cases", "case list", case_list}}) {
    if (!b.key.is_object() || !b.key.contains(k))
      throw InputError(fmt::format("gate --baseline: {} does not record its {}", path, what));
    if (b.key.at(k) != now)
      throw InputError(fmt::format("gate --baseline: {} was measured under another {} ({}); a baseline is judged only under "
                                   "the same reference tier, policy and cases",
                                   path, what, k == std::string("tier") ? "it was " + b.key.at(k).dump() + ", this run " + now.dump() : "it differs"));
  }
  for (const Case& c : cases)
    if (!b.rows.count(c.str())) throw InputError(fmt::format("gate --baseline: {} has no row of case {} (an incomplete gate)", path, c.str()));
}

// The base of a gate against stored rows: registered under "baseline/<the stored patch>", with the
// patch's op and formats; it never runs.
const Candidate& baseline_stand_in(const StoredBaseline& b, const std::string& path, const Candidate& patch) {
  const std::string name = "baseline/" + b.patch;
  if (const Candidate* c = find_candidate(name)) return *c;
  CandidateInfo info = patch.info();
  info.name = name;
  info.backend = "baseline";
  info.algorithm = "baseline";
  info.doc = fmt::format("{}'s stored rows in {}", b.patch, path);
  register_candidate(info, [name](const Case&, const TensorMap&, TensorMap&) {
    throw std::logic_error(name + " is a stored baseline and does not run");
  });
  return *find_candidate(name);
}

int cmd_gate(GateCommands& g, const std::string& cmdline) {
  // Usage first: nothing is measured or written before every option is known to be sound.
  const bool claimed = g.gate->count("--claim") > 0;
  if (claimed && !(std::isfinite(g.claim) && g.claim > 0))
    throw InputError(fmt::format("gate: --claim must be a finite speedup > 0, got {}", g.claim));
  if (claimed && g.no_time)
    throw InputError("gate: --claim needs timing; it cannot be judged with --no-time");
  if (!(std::isfinite(g.timeout) && g.timeout > 0))
    throw InputError(fmt::format("gate: --timeout must be a finite number of seconds > 0, got {}", g.timeout));
  check_option_range("gate --threads", g.threads, 0, 4096);
  set_num_threads(g.threads);
  if (g.base.empty() == g.baseline.empty())
    throw InputError("gate: give the base either as a candidate (--base NAME) or as stored rows (--baseline verdict.json), one of them");
  if (!g.baseline.empty() && claimed) throw InputError("gate: --claim needs timing, and a --baseline's kernel does not run");
  if (!g.baseline.empty() && g.resume) throw InputError("gate: --resume does not take --baseline; run the baseline gate again");
  std::optional<StoredBaseline> stored;
  if (!g.baseline.empty()) stored = read_baseline(g.baseline);
  const Candidate& base = stored ? baseline_stand_in(*stored, g.baseline, require_candidate(g.patch)) : require_candidate(g.base);
  const Candidate& patch = require_candidate(g.patch);
  if (base.info().op != patch.info().op)
    throw InputError(fmt::format("base {} implements {}, patch {} implements {}", base.name(), base.info().op,
                                 patch.name(), patch.info().op));
  std::vector<Case> cases = resolve_cases(g.suite, g.cases, "gate");
  // A suite that mixes ops (layer-gate) gives the patch the cases of its own op; a --case of another
  // op is a mistake.
  if (!g.suite.empty() && g.cases.empty()) {
    const size_t all = cases.size();
    std::erase_if(cases, [&](const Case& c) { return c.op() != base.info().op; });
    if (cases.empty())
      throw InputError(fmt::format("gate: suite {} has no case of op {} ({} implements it)", g.suite, base.info().op,
                                   patch.name()));
    if (cases.size() < all)
      std::cerr << fmt::format("gate: suite {}: the {} cases of op {}; its {} cases of other ops are for their own kernels\n",
                               g.suite, cases.size(), base.info().op, all - cases.size());
  }
  for (const Case& c : cases)
    if (c.op() != base.info().op)
      throw InputError(fmt::format("case {} is not of op {}", c.str(), base.info().op));
  // A shard judges its own cases; its key, coverage and baseline check are the whole run's.
  const std::optional<Shard> shard = resolve_shard(g.shard, "gate");
  const std::vector<Case> run_cases = cases;
  if (shard) {
    cases = shard_cases(run_cases, *shard);
    std::cerr << fmt::format("gate: shard {}: {} of the run's {} cases\n", shard->text(), cases.size(), run_cases.size());
  }
  Policy policy = g.policy.empty() ? default_policy() : read_policy(g.policy);
  // Memory and output targets: checked before anything is measured; --out stays locked for the run.
  check_cases_fit_memory(cases, "gate");
  // Without --out the verdict's files go to a folder of their own under results/ (results/README.md).
  const std::string run_id = new_run_id();
  if (g.out.empty() && !g.resume) g.out = default_gate_dir(run_id);
  if (!g.out.empty()) check_output_dir("gate --out", g.out, {"verdict.json", "verdict.md", "junit.xml"});
  if (!g.save_failures.empty()) check_output_dir("gate --save-failures", g.save_failures);
  if (!g.out.empty()) lock_output("gate --out", g.out);
  GateOptions opt;
  opt.tier = resolve_tier(g.tier, g.suite);
  if (claimed) opt.claim = g.claim;
  opt.out_dir = g.out;
  opt.run_id = run_id;
  if (!g.baseline.empty()) {
    opt.time = false;
    opt.baseline_path = g.baseline;
    check_baseline(*stored, g.baseline, run_cases, opt.tier, policy);
    opt.baseline = stored->rows;
    opt.baseline_provenance = stored->provenance;
  }
  opt.save_failures_dir = g.save_failures;
  opt.time = !g.no_time;
  opt.command = cmdline;
  opt.suite = g.suite;
  opt.wall_seconds = g.timeout;
  opt.timeout_given = g.gate->count("--timeout") > 0;
  opt.threads = g.threads;
  opt.progress = progress_enabled();
  opt.worker_args = outside_candidate_args();
  if (g.threads > 0) opt.worker_args.insert(opt.worker_args.end(), {"--threads", std::to_string(g.threads)});
  nlohmann::json case_list = nlohmann::json::array();
  for (const Case& c : run_cases) case_list.push_back(c.str());
  opt.resume_key = {{"kind", "gate"},
                    {"base", base.name()},
                    {"patch", patch.name()},
                    {"cases", case_list},
                    {"tier", tier_name(opt.tier)},
                    {"claim", opt.claim ? nlohmann::json(*opt.claim) : nlohmann::json(nullptr)},
                    {"timed", opt.time},
                    {"timeout", opt.wall_seconds},
                    {"threads", g.threads},
                    {"policy", policy_json(policy)},
                    {"binary_sha256", self_exe_sha256()},
                    {"outside", outside_json(opt.worker_args)}};
  if (shard) {
    opt.resume_key = shard_key(opt.resume_key, *shard);
    opt.shard = shard_record(*shard, cases.size());
    opt.run_cases = run_cases;
  }
  MachineLimits machine;
  const nlohmann::json here = this_machine_record();
  if (opt.time) {
    machine = load_or_measure_machine(g.machine_file, false);
    // Base and patch timed together, interleaved, on this machine: the row says which.
    opt.time_case = [&](const Candidate& b, const Candidate& p, const Case& c, const Policy& pol, double wall) {
      SpeedRow s = measure_speed(b, p, c, pol, machine, opt.worker_args, outside_args_of(opt.worker_args, b.name()), wall);
      s.machine = here;
      return s;
    };
    opt.time_alone = [&](const Candidate& k, const Case& c, double wall) {
      TimingRequest req;
      req.candidates = {k.name()};
      req.case_str = c.str();
      req.max_time_s = std::min(1.0, policy.max_time_s);
      req.wall_seconds = wall;
      req.extra_args = opt.worker_args;
      time_in_worker(req);
    };
  }
  if (g.resume) {
    if (g.out.empty()) throw InputError("gate: --resume needs --out DIR (the verdict to resume)");
    std::string path = g.out + "/verdict.json";
    if (std::filesystem::exists(path)) {
      std::stringstream ss;
      ss << read_regular_file("gate --resume", path, size_t{1} << 30);
      nlohmann::json head;
      try {
        head = parse_json_bounded(ss.str());
      } catch (const std::exception& e) {
        throw InputError(fmt::format("gate --resume: {} is not a driftgate verdict ({})", path, e.what()));
      }
      if (!head.is_object()) throw InputError(fmt::format("gate --resume: {} is not a driftgate verdict", path));
      if (head.value("base", "") != base.name() || head.value("patch", "") != patch.name())
        throw InputError(fmt::format("gate --resume: {} judges {} against {}, not {} against {}", path,
                                     head.value("patch", "?"), head.value("base", "?"), patch.name(), base.name()));
      if (std::string d = resume_key_difference(head.value("resume_key", nlohmann::json()), opt.resume_key); !d.empty())
        throw InputError(fmt::format("gate --resume: {} was written by another run: {}", path, d));
      try {
        opt.prior_rows = gate_rows_from_json(ss.str());
      } catch (const std::exception& e) {
        throw InputError(fmt::format("gate --resume: {} cannot be resumed: {}", path, e.what()));
      }
      std::cerr << fmt::format("resuming: {} cases already judged in {}\n", opt.prior_rows.size(), path);
    }
  }
  GateReport rep = run_gate(base, patch, cases, policy, opt);
  std::cout << gate_markdown(rep);
  if (!g.out.empty()) std::cout << fmt::format("\nwrote {0}/verdict.md, {0}/junit.xml, {0}/verdict.json\n", g.out);
  std::cout << fmt::format("verdict: {} (exit {})\n", verdict_text(rep), verdict_exit_code(rep.verdict));
  return verdict_exit_code(rep.verdict);
}

int cmd_bench(GateCommands& g, const std::string& cmdline) {
  std::vector<Case> cases = resolve_cases(g.b_suite, g.b_case.empty() ? std::vector<std::string>{} : std::vector<std::string>{g.b_case}, "bench");
  std::vector<const Candidate*> cands;
  std::string list = g.b_candidates;
  for (size_t start = 0; start < list.size();) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) cands.push_back(&require_candidate(list.substr(start, end - start)));
    start = end + 1;
  }
  if (cands.empty()) throw InputError("bench: give --candidate A[,B...]");
  nlohmann::json case_list = nlohmann::json::array();
  for (const Case& c : cases) case_list.push_back(c.str());
  const std::optional<Shard> shard = resolve_shard(g.b_shard, "bench");
  if (shard) {
    if (g.b_json.empty()) throw InputError("bench --shard: give --json FILE, the shard's results for driftgate merge");
    cases = shard_cases(cases, *shard);
    std::cerr << fmt::format("bench: shard {}: {} of the run's {} cases\n", shard->text(), cases.size(), case_list.size());
  }
  check_option_range("bench --max-time", g.b_max_time, 0, 3600, true);
  check_cases_fit_memory(cases, "bench");
  if (!g.b_json.empty()) {
    check_output_file("bench --json", g.b_json);
    lock_output("bench --json", g.b_json);
  }
  MachineLimits machine = load_or_measure_machine(g.machine_file, false);
  VerifyOptions vo;
  vo.tier = resolve_tier(g.b_tier, g.b_suite);
  vo.isolate = true;
  vo.worker_runs = 2;
  vo.worker_args = outside_candidate_args();
  // What produced the rows (driftgate merge checks that every shard's agrees; merge.h).
  nlohmann::json run_key = {{"kind", "bench"},          {"candidates", g.b_candidates}, {"cases", case_list},
                            {"max_time", g.b_max_time}, {"tier", tier_name(vo.tier)},  {"binary_sha256", self_exe_sha256()},
                            {"outside", outside_json(vo.worker_args)}};
  if (shard) run_key = shard_key(run_key, *shard);
  const nlohmann::json here = this_machine_record();
  nlohmann::json all = nlohmann::json::object();
  nlohmann::json drows = nlohmann::json::array();   // driftgate's rows, timed or not, in order
  int failed = 0;
  std::cout << fmt::format("{:<26} {:>11} {:>23} {:>7} {:>8} {:>8} {:>7} {:>8}  {}\n", "candidate", "median", "95% interval",
                           "noise", "GB/s", "GFLOP/s", "% limit", "speedup", "precision");
  Progress progress(cases.size());
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    const Progress::Scope line(progress, ci, c.str());
    std::cout << c.str() << "\n";
    std::vector<const Candidate*> mine;
    for (const Candidate* k : cands)
      if (k->info().op == c.op()) mine.push_back(k);
    // Precision first, in the same invocation: no speed is printed for a candidate that failed it.
    std::vector<Record> recs = verify_case(c, mine, vo);
    std::vector<const Candidate*> timed;
    for (size_t i = 0; i < mine.size(); ++i) {
      if (recs[i].disposition == Disposition::PASSED) timed.push_back(mine[i]);
      else {
        // A candidate this machine cannot run (no device) is a row with its reason, not a failure.
        if (recs[i].disposition != Disposition::NOT_SUPPORTED) ++failed;
        std::cout << fmt::format("  {:<24} not timed: {} ({})\n", mine[i]->name(), disposition_name(recs[i].disposition),
                                 recs[i].reason);
        drows.push_back({{"candidate", mine[i]->name()}, {"case", c.str()},
                         {"flag", "not timed: " + std::string(disposition_name(recs[i].disposition))},
                         {"reason", recs[i].reason}});
      }
    }
    if (timed.empty()) continue;
    // A timing worker that crashes or hangs is a row, not an abort: every candidate of the case is
    // timed again alone, so the one that fails while timed is named and the others keep their times.
    auto request = [&](const std::vector<const Candidate*>& ks) {
      TimingRequest req;
      for (const Candidate* k : ks) req.candidates.push_back(k->name());
      req.case_str = c.str();
      req.max_time_s = g.b_max_time;
      req.extra_args = vo.worker_args;
      double checked = 0;
      for (size_t i = 0; i < mine.size(); ++i)
        if (std::find(ks.begin(), ks.end(), mine[i]) != ks.end()) checked += recs[i].seconds;
      req.wall_seconds = 2 * g.b_max_time + 10 + 10 * checked;   // as the gate's timing_wall_seconds
      return req;
    };
    std::vector<BenchSamples> samples;
    try {
      samples = time_in_worker(request(timed));
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      std::vector<std::pair<const Candidate*, std::string>> faults;
      if (timed.size() == 1) faults.push_back({timed[0], e.what()});
      else
        for (const Candidate* k : timed) {
          try {
            std::vector<BenchSamples> one = time_in_worker(request({k}));
            samples.insert(samples.end(), one.begin(), one.end());
          } catch (const InputError&) {
            throw;
          } catch (const std::exception& e1) {
            faults.push_back({k, e1.what()});
          }
        }
      for (const auto& [k, why] : faults) {
        ++failed;
        std::cout << fmt::format("  {:<24} ERRORED while timed: {}\n", k->name(), why);
        drows.push_back({{"candidate", k->name()}, {"case", c.str()}, {"flag", "ERRORED while timed"}, {"reason", why}});
      }
      if (samples.empty()) continue;
    }
    double first_median = 0;
    for (const BenchSamples& s : samples) {
      Throughput t = throughput_of(s, c, machine);
      if (first_median == 0) first_median = t.median_s;
      std::string flag = !s.invalid.empty()       ? "INVALID: " + s.invalid
                         : !s.outputs_consistent ? "INVALID: " + s.inconsistency
                         : t.below_physical_bound ? std::string(t.device ? "INVALID: faster than the device's memory bandwidth"
                                                                         : "INVALID: faster than the machine's limit")
                                                  : "PASSED";
      if (flag != "PASSED") ++failed;
      std::cout << fmt::format("  {:<24} {:>9.3f}ms [{:>9.3f}, {:>9.3f}]ms {:>6.1f}% {:>8.2f} {:>8.2f} {:>6.1f}% {:>7.2f}x  {}\n",
                               s.candidate, t.median_s * 1e3, t.lo_s * 1e3, t.hi_s * 1e3, 100 * t.noise, t.gbs, t.gflops,
                               t.pct_of_limit, first_median / t.median_s, flag);
      nlohmann::json row = {{"candidate", s.candidate}, {"case", c.str()},       {"median_s", t.median_s},
                            {"lo_s", t.lo_s},          {"hi_s", t.hi_s},          {"noise", t.noise},
                            {"samples", t.samples},    {"gbs", t.gbs},            {"gflops", t.gflops},
                            {"pct_of_limit", t.pct_of_limit}, {"speedup", first_median / t.median_s}, {"flag", flag},
                            {"machine", here}};
      if (t.device) {
        std::cout << fmt::format("  {:<24} device time (above) on {}; wall {:.3f}ms, host overhead {:.0f}%; "
                                 "{:.0f} GB/s of {:.0f} GB/s peak; {} launch(es) re-measured after a clock drop{}\n",
                                 "", s.device, t.wall_median_s * 1e3, 100 * t.host_overhead, t.gbs, t.peak_gbs,
                                 s.throttled,
                                 s.low_clock ? fmt::format(", {} kept at a low clock after three", s.low_clock) : "");
        row["device"] = s.device;
        row["wall_median_s"] = t.wall_median_s;
        row["host_overhead"] = t.host_overhead;
        row["peak_gbs"] = t.peak_gbs;
        row["throttled"] = s.throttled;
        row["low_clock"] = s.low_clock;
      }
      drows.push_back(std::move(row));
    }
    nlohmann::json j = nlohmann::json::parse(compare_py_json(samples, c, run_context(cmdline)));
    if (all.empty()) all = j;
    else for (auto& b : j["benchmarks"]) all["benchmarks"].push_back(b);
  }
  if (!g.b_json.empty()) {   // written even when nothing was timed, so no earlier file outlives this run
    if (all.empty()) all = {{"context", run_context(cmdline)}, {"benchmarks", nlohmann::json::array()}};
    all["driftgate_rows"] = std::move(drows);
    all["driftgate_run_key"] = run_key;
    all["driftgate_rows_digest"] = bench_rows_digest(all, run_key);
    if (shard) all["shard"] = shard_record(*shard, cases.size());
    write_file_atomic(g.b_json, all.dump(2) + "\n");
  }
  return failed ? 1 : 0;
}

// Every canary (null and cheating candidate) of the suite's op, gated against an honest base on
// every case of the suite: each must be rejected on every case.
int cmd_selftest(GateCommands& g, const std::string& cmdline) {
  const Candidate& base = require_candidate(g.s_base);
  check_option_range("selftest --timeout", g.s_timeout, 0, 86400, true);
  std::vector<Case> cases = resolve_cases(g.s_suite, {}, "selftest");
  Policy policy = default_policy();
  policy.max_time_s = 3;            // the timing cheats are caught by rules, not by a fine interval
  policy.target_halfwidth = 0.05;
  MachineLimits machine = load_or_measure_machine(g.machine_file, false);
  GateOptions opt;
  opt.tier = resolve_tier("", g.s_suite);
  opt.command = cmdline;
  opt.wall_seconds = g.s_timeout;
  opt.memory_bytes = int64_t{2} << 30;
  // One thread granted: a canary that runs a hidden second thread breaks the budget.
  opt.time_case = [&](const Candidate& b, const Candidate& p, const Case& c, const Policy& pol, double wall) {
    return measure_speed(b, p, c, pol, machine, {"--threads", "1"}, {"--threads", "1"}, wall);
  };
  opt.time_alone = [&](const Candidate& k, const Case& c, double wall) {
    TimingRequest req;
    req.candidates = {k.name()};
    req.case_str = c.str();
    req.max_time_s = 1;
    req.wall_seconds = wall;
    req.extra_args = {"--threads", "1"};
    time_in_worker(req);
  };
  int missed = 0, canaries = 0;
  for (const Candidate* k : all_candidates()) {
    if (!is_canary(k->info()) || k->info().op != base.info().op) continue;
    ++canaries;
    GateReport rep = run_gate(base, *k, cases, policy, opt);
    // Caught: no case MERGEs and the gate as a whole does not MERGE. A case that cannot be judged
    // or is skipped (NOT_SUPPORTED) does not pass either.
    int caught = 0;
    std::string why;
    for (const GateRow& r : rep.rows) {
      if (r.verdict != Verdict::MERGE) ++caught;
      if (r.verdict == Verdict::SKIPPED && why.find("not supported") == std::string::npos)
        why += (why.empty() ? "" : ", ") + std::string("not supported (nothing judged)");
      for (const Check& c : r.checks) {
        if (c.passed) continue;
        // "patch" carries the worker's finding ("INVALID: rule alias: ..."): show its first words.
        std::string tag = c.name == "patch" ? c.detail.substr(0, c.detail.find(':', c.detail.find(':') + 1)) : c.name;
        if (why.find(tag) == std::string::npos) why += (why.empty() ? "" : ", ") + tag;
      }
    }
    bool ok = caught == static_cast<int>(rep.rows.size()) && rep.complete() && rep.verdict != Verdict::MERGE;
    if (!ok) ++missed;
    std::cout << fmt::format("{:<26} {:<12} rejected on {}/{} cases ({})  by: {}\n", k->name(), ok ? "CAUGHT" : "NOT CAUGHT",
                             caught, rep.rows.size(), verdict_name(rep.verdict), why.empty() ? "-" : why);
    // What let a canary through: each case it merged on, with its speed comparison.
    for (const GateRow& r : rep.rows)
      if (r.verdict == Verdict::MERGE)
        std::cout << fmt::format("    merged on {}: {}\n", r.case_str,
                                 r.speed ? fmt::format("speed {} {:.3f} [{:.3f}, {:.3f}], {} pairs", r.speed->verdict,
                                                       r.speed->estimate, r.speed->lo, r.speed->hi, r.speed->samples_base)
                                         : std::string("not timed"));
  }
  std::cout << fmt::format("{} of {} canaries caught on suite {}\n", canaries - missed, canaries, g.s_suite);
  return missed == 0 && canaries > 0 ? 0 : 1;
}

// A candidate wrapped to run `*fraction` slower: the wrapped run, then a spin on the steady clock
// for that fraction of the run's own time (work that costs time and nothing else). Proportional to
// each call, so the slowdown stays the asked fraction when the machine's speed drifts during the
// trials (a fixed extra time measured once would shrink in relative terms on a slower stretch).
const Candidate& slowed(const Candidate& a, const std::string& name, const double* fraction) {
  if (const Candidate* c = find_candidate(name)) return *c;
  CandidateInfo info = a.info();
  info.name = name;
  info.doc = "calibration wrapper of " + a.name();
  info.algorithm = "cheat";   // never part of a default candidate set
  register_candidate(info, [&a, fraction](const Case& c, const TensorMap& in, TensorMap& out) {
    const auto t0 = std::chrono::steady_clock::now();
    a.run(c, in, out);
    if (*fraction <= 0) return;
    const auto end = std::chrono::steady_clock::now() + (std::chrono::steady_clock::now() - t0) * *fraction;
    while (std::chrono::steady_clock::now() < end) {
    }
  });
  return *find_candidate(name);
}

// The gate's speed rule judged on itself: A against A (every FASTER/SLOWER is a false alarm) and A
// against A slowed by a known fraction (SLOWER is a detection), with compare.py's Mann-Whitney rule
// (p < 0.05, two-sided) computed on the same samples for comparison.
int cmd_calibrate(GateCommands& g) {
  const Candidate& a = require_candidate(g.c_candidate);
  Case c = parse_case(g.c_case);
  if (c.op() != a.info().op) throw InputError(fmt::format("calibrate: {} does not implement {}", a.name(), c.op()));
  check_option_range("calibrate --trials", g.c_trials, 1, 10000);
  check_option_range("calibrate --slowdown", g.c_slowdown, 0, 1, true);
  Policy policy = default_policy();
  if (g.calibrate->get_option("--max-time")->count() == 0) g.c_max_time = policy.max_time_s;   // the gate's own budget
  check_option_range("calibrate --max-time", g.c_max_time, 0, 3600, true);
  check_cases_fit_memory({c}, "calibrate");
  policy.max_time_s = g.c_max_time;
  MachineLimits machine = load_or_measure_machine(g.machine_file, false);
  // The same kernel under another name (no extra work), and the slowed one.
  static double zero = 0, fraction = 0;
  fraction = g.c_slowdown;
  const Candidate& twin = slowed(a, a.name() + "_twin", &zero);
  const Candidate& slow = slowed(a, a.name() + "_slowed", &fraction);
  BenchOptions probe;
  probe.max_time_s = 2;
  std::vector<BenchSamples> s0 = time_candidates({&a}, c, probe);
  std::cout << fmt::format("{} on {}: median {:.3f} ms; the slowed copy spins {:.0f}% of each call's own time\n",
                           a.name(), c.str(), 1e3 * median(s0[0].seconds), 100 * g.c_slowdown);
  int fa = 0, fa_mw = 0, det = 0, det_mw = 0;
  double worst_s = 0;
  for (int t = 0; t < g.c_trials; ++t) {
    std::string rows;   // each comparison: verdict, speedup [interval], pairs, seconds
    for (int slowed_trial = 0; slowed_trial < 2; ++slowed_trial) {
      auto t0 = std::chrono::steady_clock::now();
      // In this process: the calibration wrappers exist only here, and A is the caller's own kernel.
      BenchOptions bo;
      bo.max_time_s = policy.max_time_s;
      bo.min_repetitions = 7;
      const StopRule rule{policy.confidence, policy.interim_confidence, policy.target_halfwidth,
                          policy.min_effect, policy.max_time_s, 7};
      bo.max_repetitions = kMaxTimedPairs;   // as the gate's timing worker
      bo.stop = [rule, looks = 0](const std::vector<std::vector<double>>& s, double elapsed) mutable {
        return speed_should_stop(s[0], s[1], elapsed, rule, looks);
      };
      SpeedRow r = speed_row(time_candidates({&a, slowed_trial ? &slow : &twin}, c, bo), c, policy, machine);
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      worst_s = std::max(worst_s, took);
      rows += fmt::format("; {} {} {:.3f} [{:.3f}, {:.3f}] n={} {:.1f} s", slowed_trial ? "slowed" : "twin", r.verdict,
                          r.estimate, r.lo, r.hi, r.samples_patch, took);
      bool mw = r.mann_whitney_p < 0.05;
      if (!slowed_trial) {
        fa += r.verdict == "FASTER" || r.verdict == "SLOWER";
        fa_mw += mw;
      } else {
        det += r.verdict == "SLOWER";
        det_mw += mw && r.estimate < 1;
      }
    }
    std::cerr << fmt::format("[{}/{}] false alarms {} (Mann-Whitney {}), detections {} (Mann-Whitney {}){}\n", t + 1,
                             g.c_trials, fa, fa_mw, det, det_mw, rows);
  }
  // Each rate with its 95% Wilson interval.
  auto rate = [&](int k) {
    const auto [lo, hi] = wilson_interval(k, g.c_trials);
    return fmt::format("{:.1f}% [{:.1f}, {:.1f}]", 100.0 * k / g.c_trials, 100 * lo, 100 * hi);
  };
  std::cout << fmt::format("{:<34} {:>22} {:>22}\n", "", "driftgate", "Mann-Whitney");
  std::cout << fmt::format("{:<34} {:>22} {:>22}\n", "false alarms (A vs A)", rate(fa), rate(fa_mw));
  std::cout << fmt::format("{:<34} {:>22} {:>22}\n", fmt::format("detections ({:.0f}% slowdown)", 100 * g.c_slowdown),
                           rate(det), rate(det_mw));
  std::cout << "(95% Wilson intervals of each rate)\n";
  std::cout << fmt::format("trials {}, slowest comparison {:.1f} s (budget {:g} s)\n", g.c_trials, worst_s, g.c_max_time);
  return 0;
}

int cmd_machine(GateCommands& g) {
  MachineLimits m = load_or_measure_machine(g.machine_file, g.m_remeasure);
  std::cout << (g.m_json ? to_json(m).dump(2) + "\n" : describe_machine(m));
  return 0;
}

}  // namespace

std::shared_ptr<GateCommands> add_gate_commands(CLI::App& app) {
  auto g = std::make_shared<GateCommands>();
  g->gate = app.add_subcommand("gate", "MERGE or REJECT a patch against a base: precision, drift and throughput");
  g->gate->add_option("--base", g->base, "the candidate now in use (or --baseline)");
  g->gate->add_option("--baseline", g->baseline,
                      "a stored verdict.json whose patch rows are the base (a previous release that cannot run any more); "
                      "same reference tier, policy and cases; precision only");
  g->gate->add_option("--patch", g->patch, "the candidate proposed")->required();
  g->gate->add_option("--suite", g->suite, "a named suite (kda-gate, kda-gate-quick, ...)");
  g->gate->add_option("--case", g->cases, "a case string (repeatable)");
  g->gate->add_option("--policy", g->policy, "a policy TOML file (default: policies/default.toml, built in)");
  g->gate->add_option("--claim", g->claim, "claimed speedup X > 0: the interval's lower end must reach X - tolerance (not with --no-time)");
  g->gate->add_option("--out", g->out, "write verdict.json, verdict.md and junit.xml here");
  g->gate->add_option("--ref-tier", g->tier, "reference tier (default: the suite's, else dd)");
  g->gate->add_option("--save-failures", g->save_failures, "write inputs, reference and outputs of failing rows here");
  g->gate->add_flag("--no-time", g->no_time, "judge precision only");
  g->gate->add_flag("--resume", g->resume, "keep the cases already judged in --out DIR/verdict.json and judge the rest");
  g->gate->add_option("--threads", g->threads, "worker threads (default: all cores)");
  g->gate->add_option("--timeout", g->timeout, "wall-clock limit per candidate worker run (its two check runs), seconds")
      ->capture_default_str();
  g->gate->add_option("--shard", g->shard, kShardHelp);

  g->bench = app.add_subcommand("bench", "throughput of candidates (precision verified first, in the same run)");
  g->bench->add_option("--candidate", g->b_candidates, "comma-separated candidates")->required();
  g->bench->add_option("--case", g->b_case, "a case string");
  g->bench->add_option("--suite", g->b_suite, "a named suite");
  g->bench->add_option("--max-time", g->b_max_time, "time budget per case, seconds")->capture_default_str();
  g->bench->add_option("--json", g->b_json, "write Google Benchmark JSON (readable by its tools/compare.py)");
  g->bench->add_option("--ref-tier", g->b_tier, "reference tier of the precision check");
  g->bench->add_option("--shard", g->b_shard, kShardHelp);

  g->selftest = app.add_subcommand("selftest", "every null and cheating candidate must be rejected; exit 0 only then");
  g->selftest->add_option("--suite", g->s_suite, "the suite to gate them on")->capture_default_str();
  g->selftest->add_option("--base", g->s_base, "the honest base")->capture_default_str();
  g->selftest->add_option("--timeout", g->s_timeout, "wall limit per worker run, seconds")->capture_default_str();

  g->calibrate = app.add_subcommand("calibrate", "false-alarm and detection rates of the speed verdict on this machine");
  g->calibrate->add_option("--candidate", g->c_candidate, "the candidate to compare with itself")->required();
  g->calibrate->add_option("--case", g->c_case, "the case to time")->capture_default_str();
  g->calibrate->add_option("--trials", g->c_trials, "comparisons of each kind")->capture_default_str();
  g->calibrate->add_option("--slowdown", g->c_slowdown, "the known slowdown to detect (0.05 = 5%)")->capture_default_str();
  g->calibrate->add_option("--max-time", g->c_max_time, "time budget per comparison, seconds (default: the policy's max_time_s, 20)");

  g->machine = app.add_subcommand("machine", "this machine's FMA peaks, memory bandwidth and caches (cached in results/machine.json)");
  g->machine->add_flag("--json", g->m_json, "print JSON");
  g->machine->add_flag("--remeasure", g->m_remeasure, "measure again even when the cache matches this machine");
  return g;
}

int run_gate_commands(GateCommands& g, const std::string& command_line) {
  if (*g.gate) return cmd_gate(g, command_line);
  if (*g.bench) return cmd_bench(g, command_line);
  if (*g.machine) return cmd_machine(g);
  if (*g.selftest) return cmd_selftest(g, command_line);
  if (*g.calibrate) return cmd_calibrate(g);
  return -1;
}

}  // namespace dg
