// driftgate gate: one verdict on a patch. Precision and throughput of a base and a patch on the same
// inputs, judged by a Policy, per case; MERGE only when every case that was judged passes every
// check, at least one case was judged, and every planned case has a row.
//
// Verdicts (of a case, and of the whole gate), with the gate's exit code:
//   MERGE         0  every check passed
//   REJECT        1  a check failed: the patch is worse, slower, broke a rule, crashed or hung
//   CANNOT_JUDGE  4  nothing trustworthy to judge against: the base or the policy's naive
//                    candidate is not PASSED or fails its own floor on a case (its error never
//                    relaxes the patch's limit); or rule base_alone could not be settled on the
//                    timing's machine (check timing_settled: too noisy to tell whether the patch
//                    slowed the base); or the patch is NOT_SUPPORTED or ERRORED on every case; or
//                    no case was judged
//   INCOMPLETE    5  the gate stopped before every planned case had a row (killed, interrupted):
//                    verdict.json says so until `gate --resume` completes it
//   SKIPPED       -  (cases only) the patch answered NOT_SUPPORTED and the policy skips such cases
// Precedence for the whole gate (gate_verdict): INCOMPLETE > REJECT > CANNOT_JUDGE > MERGE, except
// that a patch which is ERRORED or NOT_SUPPORTED on every case is CANNOT_JUDGE: nothing about it was
// measured. A case that cannot be judged is never MERGE; a numerical REJECT on any case is REJECT
// whatever the other cases are.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/judge/policy.h"
#include "harness/judge/verify.h"

namespace dg {

enum class Verdict : uint8_t { MERGE, REJECT, CANNOT_JUDGE, INCOMPLETE, SKIPPED };
std::string_view verdict_name(Verdict v);
// The inverse of verdict_name; throws std::invalid_argument for an unknown name.
Verdict verdict_from_name(std::string_view s);
// The exit code of `driftgate gate` for a verdict (MERGE 0, REJECT 1, CANNOT_JUDGE 4, INCOMPLETE 5).
int verdict_exit_code(Verdict v);

// How a check ended: judged (passed or failed by the rule), errored (the thing to judge could not
// be measured: a crash while timed, a broken base), skipped (not applied: --no-time, a precision
// failure before timing, a case the patch does not support). JUnit: <failure>, <error>, <skipped>.
enum class CheckOutcome : uint8_t { judged, errored, skipped };
std::string_view outcome_name(CheckOutcome o);

// One rule applied to one case: "nonfinite", "min_bits.o", "precision.o.rms", "drift.o",
// "throughput", "claim", "timing", "base", "naive", "patch".
struct Check {
  std::string name;
  bool passed = false;
  std::string detail;   // the numbers behind the decision, and the reason when it fails
  CheckOutcome outcome = CheckOutcome::judged;
  // The numbers of a precision check (NaN where a check has none): the patch's value and its limit
  // (precision: error and limit; min_bits: bits and the minimum; drift: growth exponents), and how
  // far past the limit the value is, in bits: log2(value / limit) for an error, minimum - bits for
  // min_bits, +inf for a NaN/Inf mismatch or a missing output, NaN for drift (not in bits).
  // Negative when the check passed. `driftgate mutants` calls a kill weak below 1 bit.
  double value = std::numeric_limits<double>::quiet_NaN();
  double limit = std::numeric_limits<double>::quiet_NaN();
  double margin_bits = std::numeric_limits<double>::quiet_NaN();
  // What the limit was formed from (NaN where it does not apply): the base's and the naive
  // candidate's value of the same metric, and the absolute floor (precision checks: limit =
  // tail x max(base x (1 + slack), naive_factor x naive) + floor; min_bits: the base's and naive's
  // bits beside the minimum; drift: their growth exponents; throughput and claim: value is the
  // speedup's estimate, limit the interval's bound the rule reads).
  double base = std::numeric_limits<double>::quiet_NaN();
  double naive = std::numeric_limits<double>::quiet_NaN();
  double floor = std::numeric_limits<double>::quiet_NaN();
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
  std::string invalid;                   // a broken timing rule (clock, cpu_budget; harness/timing/timing_worker.h)
  // Rule base_alone neither broken nor settled in every timing (speed.cpp, settle_base_alone): the
  // machine was too noisy to tell whether the patch slowed the base, so the case is CANNOT_JUDGE.
  std::string unsettled;
  // A device patch (CUDA): its times are device time; its host wall time and overhead beside them.
  bool patch_on_device = false;
  double patch_wall_median_s = 0, patch_host_overhead = 0;
  std::string patch_device;              // the device's name
  double patch_peak_gbs = 0;             // its memory bandwidth, the bound of the INVALID rule
  int patch_throttled = 0;               // launches measured again after a clock drop
  int patch_low_clock = 0;               // launches kept at a dropped clock after three re-measures
  // Rule base_alone: the base's time beside the patch over its time alone, its interval and the
  // calls alone (0: not measured: a device candidate, or a gate read from an older file).
  double base_alone = 0, base_alone_lo = 0, base_alone_hi = 0;
  int base_alone_calls = 0;
  std::string retimed;                   // rule base_alone broken on a first timing: its finding
  // The machine base and patch were timed on, together ({"cpu", "cores", "hostname"}; merge.h):
  // a speed verdict never compares times taken on two machines. Null in files of older gates.
  nlohmann::json machine;
};

struct GateRow {
  std::string case_str;
  Record base, patch;
  std::optional<Record> naive;
  std::vector<Check> checks;
  std::optional<SpeedRow> speed;
  Verdict verdict = Verdict::REJECT;
  std::string reproduce;
  double seconds = 0;                    // wall time the case took (verify and timing)
  std::string reasons() const;           // every failed check, "; "-joined
};

// The precision checks of one case (DESIGN.md "Precision verdicts"):
//   err(patch) <= max(err(base) (1 + slack), naive_factor err(naive)) + floor   per output and metric
// plus NaN/Inf positions, the minimum bits, the drift rule, and the op's own measures (OpMeasure:
// check "op.NAME" for an absolute limit, "op.NAME.relative" for a relative one). `naive` may be null
// (the term drops).
std::vector<Check> precision_checks(const Record& base, const Record& patch, const Record* naive,
                                    const Policy& policy);

// How the gate runs a case's candidates for its precision checks (gate, mutants): the policy's
// floor (one floor in verify and gate), two runs per worker (the determinism rule).
VerifyOptions gate_verify_options(Tier tier, const Policy& policy, bool isolate, const std::vector<std::string>& worker_args,
                                  double wall_seconds, int64_t memory_bytes);

// A case's verdict from its checks and records (the one place a case is judged):
//   base or naive not PASSED, or below its own floor (Record::min_bits)     CANNOT_JUDGE
//   patch NOT_SUPPORTED and policy.not_supported == "skip"                  SKIPPED
//   any judged or errored check failed, but timing_settled                   REJECT
//   rule base_alone not settled by any timing (check timing_settled)         CANNOT_JUDGE
//   otherwise                                                               MERGE
Verdict case_verdict(const GateRow& row, const Policy& policy);

// The throughput checks: SLOWER rejects; with a claim, the interval's lower end must reach
// claim - tolerance; a time below the op's physical bound is INVALID.
std::vector<Check> speed_checks(const SpeedRow& s, std::optional<double> claim, const Policy& policy);

struct GateReport {
  std::vector<GateRow> rows;
  Verdict verdict = Verdict::INCOMPLETE;
  std::string base, patch, policy_source, command;
  std::string suite;                     // the --suite name; empty for a --case list
  std::optional<double> claim;
  bool timed = true;                     // false: --no-time, precision only
  std::vector<std::string> planned;      // every case the gate was asked to judge, in order
  std::vector<std::string> coverage_gaps;   // "axis=value" of the patch's op no planned case exercises
  std::string run_id;                    // one per driftgate process; the same in all three files
  // What a resumed gate must match (options, policy contents, tier, cases, binary, plugins): the
  // object written as "resume_key" and its SHA-256 (harness/core/digest.h).
  nlohmann::json resume_key = nlohmann::json::object();
  // gate --baseline: where the base's rows came from: the stored file's path and SHA-256, its run
  // id, rows digest, patch and context (commit, compiler, CPU); null for a gate that ran its base.
  nlohmann::json baseline;
  std::string started_at;                // UTC, ISO 8601
  std::string finished_at;               // UTC, ISO 8601: when the files were last written
  double seconds = 0;                    // wall time so far
  // A sharded gate (harness/cases/shard.h): this shard's record (merge.h shard_record), null
  // otherwise; `planned` is then this shard's cases and resume_key["cases"] the whole run's.
  nlohmann::json shard;
  // A gate merged from shards (driftgate merge): the shards given, the missing ones and the
  // machines (merge.h); null otherwise. missing_shards: indices of the shards not merged.
  nlohmann::json shards;
  std::vector<int> missing_shards;
  bool complete() const { return rows.size() >= planned.size() && missing_shards.empty(); }   // a merge lacking a shard is not
  int judged() const;                    // rows whose verdict is MERGE or REJECT
  int skipped() const;                   // rows SKIPPED (NOT_SUPPORTED under "skip")
  int cannot_judge() const;              // rows CANNOT_JUDGE
};

// The whole gate's verdict from its rows and plan (precedence in the comment at the top).
Verdict gate_verdict(const GateReport& r);
// "MERGE", or "MERGE (precision only)" when not timed, "MERGE (2 of 4 cases not supported,
// skipped)", or "INCOMPLETE (3 of 14 cases)", "INCOMPLETE (3 of 14 cases; shards missing: 1, 2 of 3)"
// for a merge.
std::string verdict_text(const GateReport& r);
// SHA-256 of the rows' canonical JSON and the resume key: verdict.json's "rows_digest". A row
// edited by hand no longer matches, and `gate --resume` refuses the file.
std::string rows_digest(const nlohmann::json& rows, const nlohmann::json& resume_key);

// Renderers of a report: versioned JSON, the Markdown table a person reads, JUnit XML (one test case
// per case and check, and one for the verdict). They read the report and nothing else; all three
// carry the run id and the rows digest, so a reader can tell they belong together.
std::string gate_json(const GateReport& r);
// verdict.json's "summary": row verdicts and speed verdicts counted, the geometric mean of the timed
// rows' speedups with a 95% interval (the mean of log speedups; each row's standard error read off
// its own interval, (log hi - log lo) / (2 x 1.96), the rows taken as independent: an interval for
// these cases, not for others), and the smallest margin, in bits, of a passed precision check.
nlohmann::ordered_json gate_summary(const GateReport& r);
// The rows of a verdict.json written by gate_json (for --resume); throws on a malformed file or
// one whose rows_digest does not match its rows and resume_key.
std::vector<GateRow> gate_rows_from_json(const std::string& text);
std::string gate_markdown(const GateReport& r);
std::string gate_junit(const GateReport& r);

}  // namespace dg
