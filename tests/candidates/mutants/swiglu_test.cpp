// The swiglu mutants and equivalent variants (candidates/mutants/swiglu.cpp), judged in this process
// against the naive f32 candidate: each mutant is rejected on the case named for it, each equivalent
// variant merges on every case.
#include <gtest/gtest.h>

#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

TEST(SwigluMutants, EachIsRejectedWhereItsBugShowsAndRewritesMerge) {
  const std::string expert = "swiglu(N=16,I=2048,regime=expert,dtype=bf16,seed=0)";
  const std::string clamp = "swiglu(N=16,I=1536,regime=clamp_edge,dtype=bf16,seed=0)";
  const std::string saturated = "swiglu(N=8,I=1000,regime=saturated,dtype=f32,seed=0)";
  const std::string tiny = "swiglu(N=8,I=100,regime=tiny,dtype=f16,seed=0)";
  check_variants("swiglu_cpu_naive_f32", {expert, clamp, saturated, tiny},
                 {{"swiglu_mutant_gate_clamp_symmetric", clamp},
                  {"swiglu_mutant_up_unclamped", clamp},
                  {"swiglu_mutant_clamp_after_silu", clamp},
                  {"swiglu_mutant_halves_swapped", expert},
                  {"swiglu_mutant_interleaved", expert},
                  {"swiglu_mutant_sigmoid_glu", expert},
                  {"swiglu_mutant_exp_ratio_sigmoid", saturated},
                  {"swiglu_mutant_silu_bf16", expert},
                  {"swiglu_mutant_cubic_exp", expert}},
                 4);
}

}  // namespace
}  // namespace dg
