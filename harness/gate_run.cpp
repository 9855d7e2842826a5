#include "harness/gate_run.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "harness/report.h"

namespace dg {

void write_gate_files(const std::string& dir, const GateReport& r) {
  std::filesystem::create_directories(dir);
  write_file_atomic(dir + "/verdict.json", gate_json(r));
  write_file_atomic(dir + "/verdict.md", gate_markdown(r));
  write_file_atomic(dir + "/junit.xml", gate_junit(r));
}

GateReport run_gate(const Candidate& base, const Candidate& patch, const std::vector<Case>& cases,
                    const Policy& policy, const GateOptions& opt) {
  GateReport rep;
  rep.base = base.name();
  rep.patch = patch.name();
  rep.policy_source = policy.source;
  rep.command = opt.command;
  rep.claim = opt.claim;
  for (const Case& c : cases) {
    auto prior = std::find_if(opt.prior_rows.begin(), opt.prior_rows.end(),
                              [&](const GateRow& g) { return g.case_str == c.str(); });
    if (prior != opt.prior_rows.end()) {
      rep.rows.push_back(*prior);
      rep.verdict = std::all_of(rep.rows.begin(), rep.rows.end(), [](const GateRow& g) { return g.verdict == Verdict::MERGE; })
                        ? Verdict::MERGE
                        : Verdict::REJECT;
      continue;
    }
    GateRow row;
    row.case_str = c.str();
    row.reproduce = fmt::format("driftgate gate --base {} --patch {} --case '{}'{}{}", base.name(), patch.name(), c.str(),
                                policy.source == "default" ? "" : " --policy " + policy.source,
                                outside_args_text(opt.worker_args));
    std::vector<const Candidate*> cands = {&base, &patch};
    std::string naive_name = policy.naive_for(c.op(), base.info().output_dtype);
    const Candidate* naive = naive_name.empty() ? nullptr : find_candidate(naive_name);
    if (!naive_name.empty() && !naive)
      throw InputError(fmt::format("policy {}: naive candidate '{}' is not registered", policy.source, naive_name));
    if (naive && naive != &base && naive != &patch) cands.push_back(naive);
    VerifyOptions vo;
    vo.tier = opt.tier;
    vo.save_failures_dir = opt.save_failures_dir;
    vo.min_bits = 0;   // the policy judges, not the verify floor
    vo.isolate = opt.isolate;
    vo.worker_runs = 2;
    vo.worker_args = opt.worker_args;
    vo.wall_seconds = opt.wall_seconds;
    vo.memory_bytes = opt.memory_bytes;
    std::vector<Record> recs = verify_case(c, cands, vo);
    row.base = recs[0];
    row.patch = recs[1];
    const Record* naive_rec = nullptr;
    if (naive == &base) naive_rec = &row.base;
    else if (naive == &patch) naive_rec = &row.patch;
    else if (naive) {
      row.naive = recs[2];
      naive_rec = &*row.naive;
    }
    row.checks = precision_checks(row.base, row.patch, naive_rec, policy);
    bool precise = std::all_of(row.checks.begin(), row.checks.end(), [](const Check& k) { return k.passed; });
    // No speed is measured, let alone shown, for a patch that failed precision.
    if (precise && opt.time && opt.time_case) {
      row.speed = opt.time_case(base, patch, c, policy);
      for (Check& k : speed_checks(*row.speed, opt.claim, policy)) row.checks.push_back(std::move(k));
    }
    bool ok = std::all_of(row.checks.begin(), row.checks.end(), [](const Check& k) { return k.passed; });
    row.verdict = ok ? Verdict::MERGE : Verdict::REJECT;
    // A case the policy rejected although the patch ran cleanly: save its inputs, reference and the
    // patch's outputs too (verify saved the ones that crashed or broke a rule).
    if (!ok && !opt.save_failures_dir.empty() && row.patch.disposition == Disposition::PASSED) {
      VerifyOptions save = vo;
      save.save_every_row = true;
      verify_case(c, {&patch}, save);
    }
    rep.rows.push_back(std::move(row));
    rep.verdict = std::all_of(rep.rows.begin(), rep.rows.end(), [](const GateRow& g) { return g.verdict == Verdict::MERGE; })
                      ? Verdict::MERGE
                      : Verdict::REJECT;
    if (!opt.out_dir.empty()) write_gate_files(opt.out_dir, rep);
  }
  return rep;
}

}  // namespace dg
