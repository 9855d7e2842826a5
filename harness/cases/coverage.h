// Coverage: which values of an op's axes the cases of a suite exercise. A suite's strength is what
// it makes a kernel do; an axis value no case reaches is a bug class the suite cannot see (a wrong
// GVA head map at H = 1, a 16-bit counter below 2^16 tokens).
//
// The axes of an op: every text parameter with a closed set of values (gate, beta, layout, dtype),
// every boolean parameter (0 and 1), the op's regimes, and the op's own axes (OpSpec::coverage:
// shapes and lengths where bugs live). A case exercises the values its parameters take, including
// those its regime implies (regime=kimi_linear means gate=softplus, beta=sigmoid).
//
// `driftgate list suites --coverage` prints every suite's coverage; `gate` warns (stderr, and the
// verdict's "coverage_gaps") about every value of the op its suite never exercises.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/cases/case.h"

namespace dg {

struct AxisCoverage {
  std::string axis;
  std::vector<std::string> covered;   // in the axis's order
  std::vector<std::string> missing;
};

// The coverage of `op`'s axes by the cases of `cases` that are of that op (others are ignored).
std::vector<AxisCoverage> op_coverage(const std::string& op, const std::vector<Case>& cases);

// "axis=value" for every value of every axis that no case of `op` in `cases` exercises.
std::vector<std::string> coverage_gaps(const std::string& op, const std::vector<Case>& cases);

// The ops of a suite's cases with their coverage: {"op": [{"axis", "covered", "missing"}, ...]}.
nlohmann::json suite_coverage_json(const std::vector<Case>& cases);

}  // namespace dg
