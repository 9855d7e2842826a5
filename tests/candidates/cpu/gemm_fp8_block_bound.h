// The format bound of gemm_fp8_block (harness/ops/gemm_fp8_block.h) measured on one candidate and
// case, for tests/candidates/cpu/gemm_fp8_block_test.cpp and tests/candidates/mutants/gemm_fp8_block_test.cpp.
#pragma once

#include <string>

#include "harness/cases/registry.h"
#include "harness/judge/verify.h"
#include "harness/ops/gemm_fp8_block.h"

namespace dg {

// The format bound's ratio of candidate `cand` on case `cs` (f64 reference).
inline double bound_ratio(const std::string& cand, const std::string& cs, std::string* where = nullptr) {
  const Case c = parse_case(cs);
  const TensorMap in = generate_inputs(c);
  const Candidate& k = require_candidate(cand);
  const RefOutputs ref = find_op("gemm_fp8_block")->reference(c, in, Tier::f64, -1);
  const TensorMap out = run_candidate(k, c, in);
  return gemm_fp8_block_bound_ratio(gemm_fp8_block_params(c), in, k.info().state_dtype, out.at("y"), ref.at("y"), where);
}

}  // namespace dg
