#include "harness/judge/gate_run.h"
#include "harness/core/progress.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <random>

#include <fmt/format.h>

#include "harness/cases/coverage.h"
#include "harness/report/report.h"

namespace dg {
std::string new_run_id() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}{:08x}{:08x}", rd(), rd(), rd(), rd());
}

std::string default_gate_dir(const std::string& run_id) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%S", &tm);
  return fmt::format("results/gate-{}-{}", buf, run_id.substr(0, 8));
}

namespace {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

std::string quoted(const std::string& s) {
  std::string q;
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return "'" + q + "'";
}

}  // namespace

void write_gate_files(const std::string& dir, const GateReport& r) {
  std::filesystem::create_directories(dir);
  // verdict.json last (gate_run.h): a reader that finds it finds the other two of the same run.
  write_file_atomic(dir + "/verdict.md", gate_markdown(r));
  write_file_atomic(dir + "/junit.xml", gate_junit(r));
  write_file_atomic(dir + "/verdict.json", gate_json(r));
}

double timing_wall_seconds(const Policy& policy, const Record& base, const Record& patch) {
  return 2 * policy.max_time_s + 10 + 10 * (base.seconds + patch.seconds);
}

std::string gate_reproduce(const std::string& base, const std::string& patch, const Case& c, const Policy& policy,
                           const GateOptions& opt) {
  std::string s = fmt::format("driftgate gate {} --patch {} --case {} --ref-tier {}",
                              opt.baseline_path.empty() ? "--base " + base
                                                        : "--baseline " + quoted(std::filesystem::absolute(opt.baseline_path).string()),
                              patch, quoted(c.str()), tier_name(opt.tier));
  if (policy.source != "default") s += " --policy " + quoted(std::filesystem::absolute(policy.source).string());
  if (opt.claim) s += fmt::format(" --claim {}", *opt.claim);
  if (!opt.time) s += " --no-time";
  if (opt.timeout_given) s += fmt::format(" --timeout {}", opt.wall_seconds);
  if (opt.threads > 0) s += fmt::format(" --threads {}", opt.threads);
  return s + outside_args_text(opt.worker_args);
}

GateReport run_gate(const Candidate& base, const Candidate& patch, const std::vector<Case>& cases,
                    const Policy& policy, const GateOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  GateReport rep;
  rep.base = base.name();
  rep.patch = patch.name();
  rep.policy_source = policy.source;
  rep.command = opt.command;
  rep.suite = opt.suite;
  rep.claim = opt.claim;
  rep.timed = opt.time;
  rep.run_id = opt.run_id.empty() ? new_run_id() : opt.run_id;
  rep.started_at = utc_now();
  rep.resume_key = opt.resume_key;
  rep.baseline = opt.baseline_provenance;
  for (const Case& c : cases) rep.planned.push_back(c.str());
  // Values of the patch's op that no case exercises (harness/cases/coverage.h): a bug there would pass.
  rep.shard = opt.shard;
  rep.coverage_gaps = coverage_gaps(patch.info().op, opt.run_cases.empty() ? cases : opt.run_cases);
  if (!rep.coverage_gaps.empty()) {
    std::string gaps;
    for (const std::string& g : rep.coverage_gaps) gaps += (gaps.empty() ? "" : ", ") + g;
    std::cerr << fmt::format("warning: these cases never exercise {} values of {} (a bug there would pass): {}\n",
                             rep.coverage_gaps.size(), patch.info().op, gaps);
  }
  auto finish = [&] {
    rep.seconds = elapsed();
    rep.finished_at = utc_now();
    rep.verdict = gate_verdict(rep);
    if (!opt.out_dir.empty()) write_gate_files(opt.out_dir, rep);
  };
  // The plan is on disk before the first case runs: a gate killed now reads INCOMPLETE (0 of n). A
  // resumed gate leaves the file it resumes in place until it has a row more to write.
  if (opt.prior_rows.empty()) finish();
  Progress progress(cases.size(), opt.progress);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    auto prior = std::find_if(opt.prior_rows.begin(), opt.prior_rows.end(),
                              [&](const GateRow& g) { return g.case_str == c.str(); });
    if (prior != opt.prior_rows.end()) {
      rep.rows.push_back(*prior);
      continue;
    }
    progress.begin(i, c.str());
    const double case_t0 = elapsed();
    GateRow row;
    row.case_str = c.str();
    row.reproduce = gate_reproduce(base.name(), patch.name(), c, policy, opt);
    // With a baseline, the base's record is the stored one and only the patch (and the naive) run.
    const Record* stored = nullptr;
    if (!opt.baseline_path.empty()) {
      const auto it = opt.baseline.find(c.str());
      if (it == opt.baseline.end())
        throw InputError(fmt::format("gate --baseline {}: no stored row of case {}", opt.baseline_path, c.str()));
      stored = &it->second;
    }
    std::vector<const Candidate*> cands = {&base, &patch};
    if (stored) cands = {&patch};
    std::string naive_name = policy.naive_for(c.op(), base.info().output_dtype);
    const Candidate* naive = naive_name.empty() ? nullptr : find_candidate(naive_name);
    if (!naive_name.empty() && !naive)
      throw InputError(fmt::format("policy {}: naive candidate '{}' is not registered", policy.source, naive_name));
    if (naive && naive != &base && naive != &patch) cands.push_back(naive);
    VerifyOptions vo = gate_verify_options(opt.tier, policy, opt.isolate, opt.worker_args, opt.wall_seconds, opt.memory_bytes);
    vo.save_failures_dir = opt.save_failures_dir;
    std::vector<Record> recs = verify_case(c, cands, vo);
    size_t next = 0;
    row.base = stored ? *stored : recs[next++];
    row.patch = recs[next++];
    const Record* naive_rec = nullptr;
    if (naive == &base) naive_rec = &row.base;
    else if (naive == &patch) naive_rec = &row.patch;
    else if (naive) {
      row.naive = recs[next];
      naive_rec = &*row.naive;
    }
    row.checks = precision_checks(row.base, row.patch, naive_rec, policy);
    bool precise = std::all_of(row.checks.begin(), row.checks.end(),
                               [](const Check& k) { return k.passed && k.outcome == CheckOutcome::judged; });
    // No speed is measured, let alone shown, for a patch that failed precision.
    if (precise && opt.time && opt.time_case && !stored) {
      const double wall = timing_wall_seconds(policy, row.base, row.patch);
      try {
        row.speed = opt.time_case(base, patch, c, policy, wall);
        for (Check& k : speed_checks(*row.speed, opt.claim, policy)) row.checks.push_back(std::move(k));
      } catch (const InputError&) {
        throw;
      } catch (const std::exception& e) {
        // Which one failed while timed? The base alone, briefly: a base that fails leaves nothing
        // to judge against; otherwise the fault is the patch's.
        std::string base_fault;
        if (opt.time_alone) {
          try {
            opt.time_alone(base, c, wall);
          } catch (const InputError&) {
            throw;
          } catch (const std::exception& eb) {
            base_fault = eb.what();
          }
        }
        if (!base_fault.empty())
          row.checks.push_back({"base", false, "the base failed while timed: " + base_fault, CheckOutcome::errored});
        else
          row.checks.push_back({"timing", false, fmt::format("ERRORED while timed (wall limit {:.0f} s): {}", wall, e.what()),
                                CheckOutcome::errored});
      }
    } else {
      row.checks.push_back({"throughput", true,
                            stored ? "not timed: the base is a stored baseline row (--baseline), its kernel does not run"
                            : !opt.time ? "not timed (--no-time): precision only"
                                      : "not timed: the case did not pass precision",
                            CheckOutcome::skipped});
    }
    row.verdict = case_verdict(row, policy);
    // A case the policy rejected although the patch ran cleanly: save its inputs, reference and the
    // patch's outputs too (verify saved the ones that crashed or broke a rule), with the gate's
    // disposition and reasons in the file, not verify's.
    if (row.verdict == Verdict::REJECT && !opt.save_failures_dir.empty() && row.patch.disposition == Disposition::PASSED) {
      VerifyOptions save = vo;
      save.save_every_row = true;
      save.save_meta = {{"disposition", "REJECT"}, {"reason", row.reasons()}, {"judged_by", "driftgate gate"}};
      verify_case(c, {&patch}, save);
    }
    row.seconds = elapsed() - case_t0;
    rep.rows.push_back(std::move(row));
    finish();
    progress.end(i, c.str(), std::string(verdict_name(rep.rows.back().verdict)));
  }
  finish();
  return rep;
}

}  // namespace dg
