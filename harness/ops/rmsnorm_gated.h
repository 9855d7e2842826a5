// The rmsnorm_gated op (reference/rmsnorm_gated.h): a case's parameters, for its regimes, candidates
// and mutants.
#pragma once

#include "harness/cases/case.h"
#include "reference/rmsnorm_gated.h"

namespace dg {

NormParams norm_params(const Case& c);   // an rmsnorm_gated case

}  // namespace dg
