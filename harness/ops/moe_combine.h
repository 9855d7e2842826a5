// moe_combine (reference/moe_combine.h): a case's parameters, for candidates and mutants.
#pragma once

#include "harness/cases/case.h"
#include "reference/moe_combine.h"

namespace dg {

MoeCombineParams moe_combine_params(const Case& c);

}  // namespace dg
