// swiglu (reference/swiglu.h): a case's parameters, for candidates and mutants.
#pragma once

#include "harness/cases/case.h"
#include "reference/swiglu.h"

namespace dg {

SwigluParams swiglu_params(const Case& c);

}  // namespace dg
