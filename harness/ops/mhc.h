// mhc (reference/mhc.h): a case's parameters, for candidates and mutants, and the op's measure.
#pragma once

#include <vector>

#include "harness/cases/case.h"
#include "reference/mhc.h"

namespace dg {

MhcParams mhc_params(const Case& c);

// max over the T tokens of max over rows and columns of |sum - 1| of C [T,4,4] (row j, column k at
// 16 t + 4 j + k), sums in double in index order; NaN when any element is not finite.
double mhc_doubly_stochastic_residual(const std::vector<double>& C, int64_t T);

}  // namespace dg
