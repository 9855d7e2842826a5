// driftgate mutants: how strong a suite is. Every mutant (one deliberate bug) and every equivalent
// variant (a legitimate rewrite) of the base's op (candidates/mutants/, harness/cases/registry.h
// is_variant) is judged against the base by the gate's precision rules on every case, exactly as
// `gate --base B --patch VARIANT --no-time` would judge it: verify_case with two check runs per
// candidate in worker processes, precision_checks against the base and the policy's naive
// candidate, case_verdict (harness/judge/gate.h). Each case's reference, base and naive runs are computed
// once and shared by all variants.
//
//   a mutant is KILLED on a case when that case's verdict is REJECT; it SURVIVES the suite when no
//   case rejects it. An equivalent variant REJECTED on any case is a false reject.
//   A case whose base or naive candidate cannot be judged (CANNOT_JUDGE) kills nothing.
//   kill rate = killed mutants / mutants. Exit 0 when every mutant is killed and no equivalent
//   variant is rejected, 1 otherwise, 2 on bad input (unknown base, malformed case, no case of the
//   base's op, no variant of the op), 3 on an internal error.
//
// Cost of a case (for "the cheapest case that kills"): the op's flops (OpSpec::flops), proportional
// to tokens x value heads x K x V for KDA.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/judge/gate.h"

namespace dg {

// One cell of the kill matrix: a variant judged on a case.
// A kill is weak when on every case that rejects the mutant the rule that fired clearest is less
// than this many bits past its limit (Check::margin_bits): a slightly better-behaved bug, or a
// slightly noisier base, would survive.
inline constexpr double kWeakKillBits = 1.0;

struct KillCell {
  Verdict verdict = Verdict::MERGE;
  std::vector<std::string> fired;   // the failed checks ("precision.o.rms", "min_bits.ht", "patch", ...)
  std::string detail;               // the first failed check's numbers
  // The largest margin_bits of the failed checks that have one (a NaN/Inf mismatch or a missing
  // output: +inf); +inf when no failed check has one (only drift, a crash, a rule break); -inf when
  // none failed.
  double margin_bits = -std::numeric_limits<double>::infinity();
  // Per output of the variant ("o", "ht"): rms_ratio, max_abs and bits, so that other limits can be
  // evaluated from the JSON without running again.
  nlohmann::json metrics = nlohmann::json::object();
};

struct VariantRow {
  std::string candidate, kind, doc;   // kind: "mutant" or "equivalent"
  std::vector<KillCell> cells;        // one per case, in KillMatrix::cases order
  bool rejected() const;              // some case REJECTs it
  // The case of least cost that rejects it (index into KillMatrix::cases); nullopt when none does.
  std::optional<size_t> cheapest_kill;
  // The largest margin over the cases that reject it (-inf when none does); weak below kWeakKillBits.
  double kill_margin_bits() const;
};

struct KillMatrix {
  std::string base, suite, policy_source, command;
  std::vector<std::string> cases;
  std::vector<double> case_cost;      // OpSpec::flops of each case
  // The base's and the naive candidate's metrics per case (as KillCell::metrics; naive null when the
  // policy names none or it is the base).
  std::vector<nlohmann::json> case_base, case_naive;
  // --seeds N: every case given was run at its seed and the N - 1 seeds after it; `cases` holds
  // them all, case-major (case 0 at seeds s..s+N-1, then case 1, ...), and the table groups them.
  int seeds = 1;
  std::vector<std::string> skipped;   // cases of another op than the base's (not run)
  std::vector<VariantRow> rows;       // mutants first, then equivalent variants, each by name
  double seconds = 0;
  int mutants() const;
  int killed() const;
  int equivalents() const;
  int false_rejects() const;
  double kill_rate() const;           // killed / mutants (0 when there are none)
  std::vector<std::string> survivors() const;
  std::vector<std::string> weak_kills() const;   // mutants killed by less than kWeakKillBits everywhere
  std::vector<std::string> rejected_equivalents() const;
  // Cases on which nothing could be judged (the base or naive candidate unsound: every cell "?"),
  // with the reason; their mutants count as not killed there.
  std::vector<std::pair<std::string, std::string>> unjudged() const;
  int exit_code() const { return killed() == mutants() && false_rejects() == 0 ? 0 : 1; }
};

struct MutantOptions {
  Tier tier = Tier::dd;
  std::string command;
  double wall_seconds = 600;                // per candidate worker run
  int64_t memory_bytes = int64_t{8} << 30;
  std::vector<std::string> worker_args;     // --threads N, --plugin, --exec
  bool progress = false;                    // a line per case on stderr
  bool isolate = true;                      // false: candidates run in this process (tests)
  // Honest candidates judged as equivalent variants besides the built-in ones (--equivalent): a
  // rewrite of the op (another algorithm, a plugin) that must MERGE on every case and seed.
  std::vector<const Candidate*> equivalents;
  std::string only;                         // "", "mutants" or "equivalents": run only those variants
};

// The mutants and equivalent variants of an op, by kind then name.
std::vector<const Candidate*> variants_of(const std::string& op);

// Judges every variant of base's op on every case of base's op (other cases are listed in
// KillMatrix::skipped). InputError when base is itself a variant or canary, when no case is of its
// op or when there is no variant to run.
KillMatrix run_mutants(const Candidate& base, const std::vector<Case>& cases, const Policy& policy,
                       const MutantOptions& opt);

// Renderers, from the matrix alone: the table a person reads and versioned JSON.
//   JSON: {schema_version, kind: "driftgate.mutants", base, suite, policy, command, seconds,
//          skipped_cases, unjudged_cases: [{case, reason}],
//          seeds, cases: [{case, cost, base: {OUT: {rms, max_abs, bits}}, naive: {...}|null}],
//          variants: [{candidate, kind, doc, killed|rejected, cheapest_kill, cheapest_kill_cost,
//                      rejected_cells, cells: [{case, verdict, fired, detail, margin_bits,
//                                               metrics: {OUT: {rms, max_abs, bits}}}]}],
//          summary: {mutants, killed, kill_rate, survivors, equivalents, false_rejects,
//                    rejected_equivalents}}
std::string kill_matrix_text(const KillMatrix& m);
nlohmann::json kill_matrix_json(const KillMatrix& m);

// The committed kill rates (datasets/kill_rates.json, compiled in): suite name -> the record
// {base, kill_rate, killed, mutants, survivors, false_rejects, measured}. Empty object when the file
// holds none.
const nlohmann::json& committed_kill_rates();

// `driftgate mutants`: checks every option before any work (exit 2 via InputError), runs, prints the
// matrix, writes --json atomically, returns KillMatrix::exit_code.
struct MutantsArgs {
  std::string base, suite, json, policy, tier;
  std::vector<std::string> cases;
  int threads = 0;
  double timeout = 600;
  int seeds = 1;                          // every case at its seed and the seeds - 1 after it
  std::vector<std::string> equivalents;   // more honest candidates judged as equivalent variants
  std::string only;                       // "mutants" or "equivalents"
  std::vector<std::string> worker_args;   // --plugin/--exec forwarded to the workers
};

// The cases at their own seed and the `seeds` - 1 seeds after it, case-major.
std::vector<Case> expand_seeds(const std::vector<Case>& cases, int seeds);
int cmd_mutants(const MutantsArgs& a, const std::string& command_line);

}  // namespace dg
