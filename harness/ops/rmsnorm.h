// rmsnorm and add_rmsnorm (reference/rmsnorm.h): a case's parameters, for candidates and mutants.
#pragma once

#include "harness/cases/case.h"
#include "reference/rmsnorm.h"

namespace dg {

RmsNormParams rmsnorm_params(const Case& c);   // a rmsnorm or add_rmsnorm case

}  // namespace dg
