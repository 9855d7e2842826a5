// driftgate verify: run the reference and candidates on the same inputs, measure precision drift,
// and turn it into one Record per (case, candidate).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/cases/case.h"
#include "harness/metrics/metrics.h"
#include "harness/judge/policy.h"
#include "harness/cases/registry.h"
#include "reference/real/tier.h"

namespace dg {

// Outcomes are enums, never bools (DESIGN.md).
enum class Disposition : uint8_t { PASSED, INCORRECT, ERRORED, INVALID, NOT_SUPPORTED, SKIPPED };
std::string_view disposition_name(Disposition d);

struct OutputResult {
  std::string name;                 // "o", "ht"
  DType dtype;                      // the candidate's dtype for this output (its ULP format)
  TensorMetrics metrics;
  std::optional<DriftCurve> drift;  // sequence outputs only
};

struct Certificate {
  Certification cert;               // the tier's agreement with the next tier up, and the sample
  bool sufficient = false;          // ref_bits >= the candidate's output precision + 20 (certified_for)
};

struct Record {
  std::string case_str;
  std::string op;
  std::string candidate;
  Tier tier = Tier::f64;
  std::optional<Certificate> cert;
  std::vector<OutputResult> outputs;
  std::vector<OpMeasure> measures;  // the op's own measures (OpSpec::measure), when it has them
  Disposition disposition = Disposition::SKIPPED;
  std::string reason;               // why it is not PASSED (empty when PASSED)
  double min_bits = 0;              // the floor it was judged against
  double seconds = 0;               // candidate wall time over the whole case
  double ref_seconds = 0;           // reference wall time (shared by the case's rows)
  double flops = 0, bytes = 0;      // work of the case
  std::string reproduce;            // a command that reproduces this row
  std::string confinement;          // the worker's sandbox (harness/isolation/sandbox.h): "pid+net namespace,
                                    // landlock abi 7"; empty when it ran in process
};

// The output a table's bits, ULP and drift columns show: "o", else "y", else the first; and the
// state beside it ("ht", else "state"). nullptr when there is none.
const OutputResult* primary_output(const Record& r);
const OutputResult* state_output(const Record& r);

// The floor: the fewest bits (-log2 rms_ratio) a sound kernel whose outputs are in `format` keeps on
// every case. Below it a candidate is INCORRECT even without a base to compare with (the gate's
// relative rule is stricter). One table for verify and gate: the policy's [precision.min_bits]
// (policies/default.toml: f64 40, f32 12, tf32 6, f16 6, bf16 5, e4m3 2, e5m2 1); verify_floor_bits
// reads the default policy's.
double verify_floor_bits(DType format);
// A candidate is held to the floor of the narrowest of its input, state and output dtypes (a bf16
// state limits an f32 output), in `policy`'s table. verify and gate both judge by this.
double candidate_floor_bits(const Policy& policy, const CandidateInfo& info);

struct VerifyOptions {
  Tier tier = Tier::dd;
  bool certify = false;
  std::string save_failures_dir;    // empty: do not save
  bool save_every_row = false;      // save every row's inputs, reference and outputs there (the gate
                                    // saves a case its policy rejected although verify passed it)
  std::optional<double> min_bits;   // overrides the floor (verify --min-bits)
  const Policy* floor_policy = nullptr;   // the floor's table (nullptr: the default policy)
  // Metadata that replaces the saved file's own (the gate's disposition and reasons for a case it
  // rejected although verify passed the patch).
  std::map<std::string, std::string> save_meta;
  std::string candidates_arg;       // for reproduce commands
  // Isolation: run every candidate in a worker process (harness/isolation/worker.h) with these limits and
  // check runs; false runs candidates in this process (tests of candidates registered in a test).
  bool isolate = false;
  int worker_runs = 1;              // 2 adds the determinism rule (two poisons must agree bitwise)
  double wall_seconds = 600;
  int64_t memory_bytes = int64_t{8} << 30;
  std::vector<std::string> worker_args;   // forwarded to the worker (--plugin, --exec)
};

// Verifies one case. `stored` holds inputs read from a file (nullptr: generate from the case).
// Throws InputError for bad input (before anything is measured).
std::vector<Record> verify_case(const Case& c, const std::vector<const Candidate*>& candidates,
                                const VerifyOptions& opt, const TensorMap* stored = nullptr);

// The --plugin/--exec arguments among worker_args, shell-quoted, for reproduce commands ("" if none).
std::string outside_args_text(const std::vector<std::string>& worker_args);

// The inputs of a case from its regime generator.
TensorMap generate_inputs(const Case& c);

// Runs a candidate on a case (through the op's driver) into freshly allocated outputs.
TensorMap run_candidate(const Candidate& cand, const Case& c, const TensorMap& in);

// verify --json's "rows_digest": SHA-256 of its resume key and records (`records` and `key` as JSON),
// so a file edited by hand is refused by --resume and by merge.
std::string verify_rows_digest(const nlohmann::json& records, const nlohmann::json& key);

}  // namespace dg
