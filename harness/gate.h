// driftgate gate: one verdict on a patch. Precision and throughput of a base and a patch on the same
// inputs, judged by a Policy, per case; MERGE only when every case passes every check.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/policy.h"
#include "harness/verify.h"

namespace dg {

enum class Verdict : uint8_t { MERGE, REJECT };
std::string_view verdict_name(Verdict v);

// One rule applied to one case: "nonfinite", "min_bits.o", "precision.o.rms", "drift.o",
// "throughput", "claim", "base", "patch".
struct Check {
  std::string name;
  bool passed = false;
  std::string detail;   // the numbers behind the decision, and the reason when it fails
};

// Throughput of a case: the speedup of patch over base with its interval and verdict.
struct SpeedRow {
  double estimate = 0, lo = 0, hi = 0;   // speedup = time(base) / time(patch)
  std::string verdict;                   // FASTER SAME SLOWER AMBIGUOUS
  double base_median_s = 0, patch_median_s = 0;
  double noise_base = 0, noise_patch = 0;  // relative (MAD / median)
  int samples_base = 0, samples_patch = 0;
  double mann_whitney_p = 1;             // compare.py's test, for reference
  double gflops_patch = 0, gbs_patch = 0, pct_of_limit_patch = 0;
  bool below_physical_bound = false;
  std::string inconsistent;              // timed calls whose outputs differ from a re-run (cached results)
  std::string invalid;                   // a broken timing rule (clock, cpu_budget; harness/timing_worker.h)
  // A device patch (CUDA): its times are device time; its host wall time and overhead beside them.
  bool patch_on_device = false;
  double patch_wall_median_s = 0, patch_host_overhead = 0;
  std::string patch_device;              // the device's name
  double patch_peak_gbs = 0;             // its memory bandwidth, the bound of the INVALID rule
  int patch_throttled = 0;               // launches measured again after a clock drop
  int patch_low_clock = 0;               // launches kept at a dropped clock after three re-measures
};

struct GateRow {
  std::string case_str;
  Record base, patch;
  std::optional<Record> naive;
  std::vector<Check> checks;
  std::optional<SpeedRow> speed;
  Verdict verdict = Verdict::REJECT;
  std::string reproduce;
  std::string reasons() const;           // every failed check, "; "-joined
};

// The precision checks of one case (DESIGN.md "Precision verdicts"):
//   err(patch) <= max(err(base) (1 + slack), naive_factor err(naive)) + floor   per output and metric
// plus NaN/Inf positions, the minimum bits, and the drift rule. `naive` may be null (the term drops).
std::vector<Check> precision_checks(const Record& base, const Record& patch, const Record* naive,
                                    const Policy& policy);

// The throughput checks: SLOWER rejects; with a claim, the interval's lower end must reach
// claim - tolerance; a time below the op's physical bound is INVALID.
std::vector<Check> speed_checks(const SpeedRow& s, std::optional<double> claim, const Policy& policy);

struct GateReport {
  std::vector<GateRow> rows;
  Verdict verdict = Verdict::REJECT;
  std::string base, patch, policy_source, command;
  std::optional<double> claim;
};

// Renderers of a report: versioned JSON, the Markdown table a person reads, JUnit XML (one test case
// per case and check).
std::string gate_json(const GateReport& r);
// The rows of a verdict.json written by gate_json (for --resume); throws on a malformed file.
std::vector<GateRow> gate_rows_from_json(const std::string& text);
std::string gate_markdown(const GateReport& r);
std::string gate_junit(const GateReport& r);

}  // namespace dg
