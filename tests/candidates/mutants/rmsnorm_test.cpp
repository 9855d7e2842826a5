// The rmsnorm and add_rmsnorm mutants and equivalent variants (candidates/mutants/rmsnorm.cpp),
// judged in this process by harness/judge/mutants.h against the naive f32 candidates: each mutant is
// rejected on the case named for it, each equivalent variant merges on every case.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

TEST(RmsNormMutants, EachIsRejectedWhereItsBugShowsAndRewritesMerge) {
  const std::string hidden = "rmsnorm(N=16,D=4096,regime=hidden,dtype=bf16,seed=0)";
  const std::string tiny = "rmsnorm(N=16,D=1000,regime=tiny_rms,dtype=f32,seed=0)";
  const std::string offset = "rmsnorm(N=8,D=2048,regime=offset,dtype=f16,seed=0)";
  const std::string qk = "rmsnorm(N=64,D=128,regime=qk_norm,dtype=bf16,seed=0)";
  check_variants("rmsnorm_cpu_naive_f32", {hidden, tiny, offset, qk},
                 {{"rmsnorm_mutant_sum_bf16", hidden},
                  {"rmsnorm_mutant_eps_outside_sqrt", tiny},
                  {"rmsnorm_mutant_eps_1e6", tiny},
                  {"rmsnorm_mutant_mean_subtracted", offset},
                  {"rmsnorm_mutant_one_plus_weight", qk},
                  {"rmsnorm_mutant_rsqrt_estimate", hidden},
                  {"rmsnorm_mutant_unbiased", qk}}, 4);
}

TEST(AddRmsNormMutants, EachIsRejectedWhereItsBugShowsAndRewritesMerge) {
  const std::string hidden = "add_rmsnorm(N=16,D=4096,regime=hidden,dtype=bf16,seed=0)";
  const std::string cancel = "add_rmsnorm(N=16,D=2050,regime=cancel,dtype=bf16,seed=0)";
  const std::string tiny = "add_rmsnorm(N=16,D=256,regime=tiny_rms,dtype=f32,seed=0)";
  const std::string offset = "add_rmsnorm(N=4,D=100,regime=offset,dtype=f64,seed=0)";
  check_variants("add_rmsnorm_cpu_naive_f32", {hidden, cancel, tiny, offset},
                 {{"add_rmsnorm_mutant_sum_bf16", hidden},
                  {"add_rmsnorm_mutant_eps_outside_sqrt", tiny},
                  {"add_rmsnorm_mutant_eps_1e6", tiny},
                  {"add_rmsnorm_mutant_mean_subtracted", offset},
                  {"add_rmsnorm_mutant_one_plus_weight", hidden},
                  {"add_rmsnorm_mutant_rsqrt_estimate", hidden},
                  {"add_rmsnorm_mutant_unbiased", offset},
                  {"add_rmsnorm_mutant_square_unrounded", cancel},
                  {"add_rmsnorm_mutant_residual_stale", hidden},
                  {"add_rmsnorm_mutant_norm_of_x", hidden}}, 4);
}

}  // namespace
}  // namespace dg
