// gemm (reference/gemm.h): a case's parameters, for candidates and mutants.
#pragma once

#include "harness/cases/case.h"
#include "reference/gemm.h"

namespace dg {

GemmParams gemm_params(const Case& c);

}  // namespace dg
