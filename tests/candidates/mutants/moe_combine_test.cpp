// The moe_combine mutants and equivalent variants (candidates/mutants/moe_combine.cpp), judged in this
// process against the naive f32 candidate: each mutant is rejected on the case named for it, each
// equivalent variant merges on every case.
#include <gtest/gtest.h>

#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

TEST(MoeCombineMutants, EachIsRejectedWhereItsBugShowsAndRewritesMerge) {
  const std::string prod = "moe_combine(T=16,topk=8,H=4096,rsf=2.5,regime=production,dtype=bf16,seed=0)";
  const std::string out = "moe_combine(T=8,topk=8,H=1000,rsf=2.5,rsf_on=output,regime=production,dtype=f32,seed=0)";
  const std::string cancel = "moe_combine(T=8,topk=4,H=2048,rsf=1.8,regime=cancel,dtype=bf16,seed=0)";
  const std::string shared = "moe_combine(T=8,topk=8,H=300,rsf=2.446,regime=large_shared,dtype=bf16,seed=0)";
  check_variants("moe_combine_cpu_naive_f32", {prod, out, cancel, shared},
                 {{"moe_combine_mutant_acc_bf16", prod},
                  {"moe_combine_mutant_terms_bf16", cancel},
                  {"moe_combine_mutant_rsf_twice", prod},
                  {"moe_combine_mutant_rsf_missing", out},
                  {"moe_combine_mutant_rsf_scales_shared", shared},
                  {"moe_combine_mutant_routed_bf16_then_rsf", out},
                  {"moe_combine_mutant_routed_bf16_before_shared", prod},
                  {"moe_combine_mutant_wrong_slot", prod},
                  {"moe_combine_mutant_shared_dropped", prod}},
                 5);
}

}  // namespace
}  // namespace dg
