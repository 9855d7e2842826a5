// The merge policy: the rules `driftgate gate` applies to a base and a patch, read from TOML
// (policies/default.toml documents every rule; a policy file may set any subset of its keys).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harness/core/dtype.h"

namespace dg {

struct Policy {
  // precision
  double slack = 0.5;
  double naive_factor = 2.0;
  double floor_ulps = 1.0;
  double tail_factor = 2.0;   // max_abs: its limit is this times the rms rule's (policies/default.toml)
  std::vector<std::string> metrics = {"rms", "max_abs"};
  double drift_margin = 0.15;
  int64_t drift_min_positions = 1024;
  std::map<std::string, double> min_bits;          // by output format name
  std::map<std::string, std::string> naive;        // "op.format" -> candidate
  // throughput
  double confidence = 0.95;
  double min_effect = 0.03;
  double max_time_s = 20;
  double target_halfwidth = 0.01;
  double interim_confidence = 0.999;   // a decided early stop (stats.h speed_should_stop); 1: none
  double claim_tolerance = 0.02;
  // cases ([cases] in TOML): what a case the patch answers NOT_SUPPORTED for counts as.
  //   "skip"    not judged (SKIPPED); at least one case of the gate must still be judged
  //   "reject"  the case is a REJECT
  std::string not_supported = "skip";

  std::string source;   // where it was read from

  double min_bits_for(DType format) const;
  // The naive same-precision candidate of an op in a format; empty when the policy names none.
  std::string naive_for(const std::string& op, DType format) const;
};

// The range of every number of a policy (policies/default.toml documents each): a policy outside
// them could merge a null candidate (slack or naive_factor huge, min_bits negative, min_effect that
// calls any slowdown SAME) or reject every kernel. NaN and infinities are outside every range.
struct PolicyBound {
  const char* key;   // "precision.slack"
  double lo, hi;     // inclusive
  double Policy::*field;
};
const std::vector<PolicyBound>& policy_bounds();
inline constexpr int64_t kMaxDriftMinPositions = int64_t{1} << 20;
// The first rule `p` breaks (a bound above, min_bits in [1, the format's significand bits], at least
// one metric, no canary as a naive kernel), or "" when it keeps every one.
std::string policy_problem(const Policy& p);

// The built-in default (policies/default.toml compiled in).
Policy default_policy();
// Reads a policy file over the default; unknown keys, wrong types and bad values throw InputError
// naming the file and the key.
Policy read_policy(const std::string& path);
Policy parse_policy(const std::string& toml_text, const std::string& source);

}  // namespace dg
