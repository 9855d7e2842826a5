// The mhc mutants and equivalent variants (candidates/mutants/mhc.cpp), judged in this process
// against the fused candidate they are variants of: each mutant is rejected on the case named for
// it, each equivalent variant merges on every case.
#include <gtest/gtest.h>

#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

TEST(MhcMutants, EachIsRejectedWhereItsBugShowsAndRewritesMerge) {
  const std::string typical = "mhc(T=4,H=4096,regime=typical,dtype=bf16,seed=0)";
  const std::string peaked = "mhc(T=8,H=256,regime=peaked_comb,dtype=bf16,seed=0)";
  const std::string tiny = "mhc(T=4,H=1024,regime=tiny_streams,dtype=bf16,seed=0)";
  const std::string uneven = "mhc(T=8,H=64,iters=7,regime=uneven_streams,dtype=bf16,seed=0)";
  check_variants("mhc_cpu_fused_f32", {typical, peaked, tiny, uneven},
                 {{"mhc_mutant_one_iter_short", peaked},
                  {"mhc_mutant_untransposed", typical},
                  {"mhc_mutant_sinkhorn_no_eps", peaked},
                  {"mhc_mutant_norm_eps_outside", tiny},
                  {"mhc_mutant_norm_per_stream", uneven},
                  {"mhc_mutant_pre_no_eps", peaked},
                  {"mhc_mutant_post_no_2", typical},
                  {"mhc_mutant_softmax_no_max", peaked},
                  {"mhc_mutant_cols_rows_swapped", peaked},
                  {"mhc_mutant_sumsq_bf16", typical}},
                 5);
}

}  // namespace
}  // namespace dg
