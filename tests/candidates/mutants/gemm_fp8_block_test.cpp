// The gemm_fp8_block mutants and equivalent variants (candidates/mutants/gemm_fp8_block.cpp), judged in
// this process against the naive f32 candidate: each mutant is rejected on the case named for it,
// each equivalent variant merges on every case; the op's format bound catches two bugs on its own.
#include <gtest/gtest.h>

#include "tests/candidates/cpu/gemm_fp8_block_bound.h"
#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

TEST(GemmFp8BlockMutants, EachIsRejectedWhereItsBugShowsAndRewritesMerge) {
  const std::string prod = "gemm_fp8_block(M=16,N=512,K=4096,regime=production,dtype=e4m3,seed=0)";
  const std::string decode = "gemm_fp8_block(M=1,N=300,K=2048,regime=production,dtype=e4m3,seed=0)";
  const std::string wide = "gemm_fp8_block(M=4,N=200,K=7168,regime=wide_range,dtype=e4m3,seed=0)";
  check_variants("gemm_fp8_block_cpu_naive_f32", {prod, decode, wide},
                 {{"gemm_fp8_block_mutant_scale_divisor", prod},
                  {"gemm_fp8_block_mutant_no_promotion", wide},
                  {"gemm_fp8_block_mutant_per_tensor_scale", prod},
                  {"gemm_fp8_block_mutant_x_scale_shifted", prod},
                  {"gemm_fp8_block_mutant_w_scale_transposed", decode},
                  {"gemm_fp8_block_mutant_output_bf16", prod},
                  {"gemm_fp8_block_mutant_partial_bf16", prod},
                  {"gemm_fp8_block_mutant_scales_bf16", wide},
                  {"gemm_fp8_block_mutant_decode_e5m2", decode},
                  {"gemm_fp8_block_mutant_decode_fnuz", decode}},
                 5);
}

// A kernel that never promotes (the whole K in the 14-bit accumulator) breaks the bound where outlier
// blocks are summed with the rest, the scales used as divisors everywhere.
TEST(GemmFp8BlockCpu, TheBoundCatchesAMissingPromotionAndAScaleDivisor) {
  const std::string wide = "gemm_fp8_block(M=4,N=200,K=7168,regime=wide_range,dtype=e4m3,seed=0)";
  const std::string prod = "gemm_fp8_block(M=16,N=512,K=4096,regime=production,dtype=e4m3,seed=0)";
  EXPECT_GT(bound_ratio("gemm_fp8_block_mutant_no_promotion", wide), 1.0);
  EXPECT_GT(bound_ratio("gemm_fp8_block_mutant_scale_divisor", prod), 1.0);
}

}  // namespace
}  // namespace dg
