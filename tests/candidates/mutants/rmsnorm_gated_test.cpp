// The rmsnorm_gated mutants and equivalent variants (candidates/mutants/rmsnorm_gated.cpp), judged
// in this process by harness/judge/mutants.h: each mutant is rejected on the case named for it,
// each equivalent variant merges on every case.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

TEST(LayerMutants, RmsNormGated) {
  const std::string plain = "rmsnorm_gated(N=256,D=128,regime=kimi_linear,dtype=bf16,seed=0)";
  const std::string tiny = "rmsnorm_gated(N=256,D=128,regime=tiny_rms,dtype=bf16,seed=0)";
  check_variants("rmsnorm_gated_cpu_f32", {plain, tiny},
                 {{"rmsnorm_gated_mutant_eps_outside_sqrt", tiny},
                  {"rmsnorm_gated_mutant_silu_gate", plain},
                  {"rmsnorm_gated_mutant_double_round", plain},
                  {"rmsnorm_gated_mutant_sum_bf16", plain}}, 2);
}

}  // namespace
}  // namespace dg
