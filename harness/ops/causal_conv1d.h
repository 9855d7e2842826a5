// The causal_conv1d op (reference/causal_conv1d.h): a case's parameters, for its regimes, candidates
// and mutants.
#pragma once

#include "harness/cases/case.h"
#include "reference/causal_conv1d.h"

namespace dg {

ConvParams conv_params(const Case& c);   // a causal_conv1d case

}  // namespace dg
