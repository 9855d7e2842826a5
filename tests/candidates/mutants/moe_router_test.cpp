// The moe_router mutants and equivalent variants (candidates/mutants/moe_router.cpp), judged in this
// process against the naive f32 candidate: each mutant is rejected on the case named for it (by its
// op measures: a wide flip, a tie against the rule, or its weight error), each equivalent variant
// merges on every case.
#include <gtest/gtest.h>

#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

TEST(MoeRouterMutants, EachIsRejectedWhereItsBugShowsAndRewritesMerge) {
  const std::string prod = "moe_router(T=64,E=256,k=8,n_group=8,topk_group=4,regime=production,dtype=f32,seed=0)";
  const std::string ties = "moe_router(T=64,E=64,k=4,rsf=1.8,regime=exact_ties,dtype=f32,seed=0)";
  const std::string dom = "moe_router(T=64,E=256,k=8,n_group=8,topk_group=4,regime=bias_dominant,dtype=f32,seed=0)";
  const std::string sat = "moe_router(T=64,E=160,k=8,regime=saturated,dtype=bf16,seed=0)";
  const std::string near = "moe_router(T=64,E=288,k=8,regime=near_ties,dtype=f32,seed=0)";
  check_variants("moe_router_cpu_naive_f32", {prod, ties, dom, sat, near},
                 {{"moe_router_mutant_biased_weights", prod},
                  {"moe_router_mutant_bias_ignored", prod},
                  {"moe_router_mutant_softmax", prod},
                  {"moe_router_mutant_renorm_missing", prod},
                  {"moe_router_mutant_renorm_eps_outside", sat},
                  {"moe_router_mutant_rsf_missing", prod},
                  {"moe_router_mutant_rsf_twice", prod},
                  {"moe_router_mutant_group_max", prod},
                  {"moe_router_mutant_topk_group_ignored", prod},
                  {"moe_router_mutant_scores_bf16", prod},
                  {"moe_router_mutant_bias_bf16", dom},
                  {"moe_router_mutant_ties_high_index", ties},
                  {"moe_router_mutant_cubic_exp", prod},
                  {"moe_router_mutant_group_off_by_one", prod},
                  {"moe_router_mutant_mask_zero", dom}},
                 3);
}

}  // namespace
}  // namespace dg
