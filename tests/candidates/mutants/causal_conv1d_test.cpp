// The causal_conv1d mutants and equivalent variants (candidates/mutants/causal_conv1d.cpp), judged
// in this process by harness/judge/mutants.h: each mutant is rejected on the case named for it,
// each equivalent variant merges on every case.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

TEST(LayerMutants, CausalConv1d) {
  const std::string with_state = "causal_conv1d(T=64,B=2,D=256,regime=kimi_linear,dtype=bf16,seed=0)";
  const std::string no_state = "causal_conv1d(T=33,D=100,W=3,state=0,regime=kimi_linear,dtype=bf16,seed=0)";
  check_variants("causal_conv1d_cpu_direct_f32", {with_state, no_state},
                 {{"causal_conv1d_mutant_reverse_taps", no_state},
                  {"causal_conv1d_mutant_state_newest_first", no_state},
                  {"causal_conv1d_mutant_double_round", no_state},
                  {"causal_conv1d_mutant_state_frozen", with_state}}, 2);
}

}  // namespace
}  // namespace dg
