// The gemm mutants and equivalent variants (candidates/mutants/gemm.cpp), judged in this process
// against the naive f32 candidate: each mutant is rejected on the case named for it, each equivalent
// variant merges on every case.
#include <gtest/gtest.h>

#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

TEST(GemmMutants, EachIsRejectedWhereItsBugShowsAndRewritesMerge) {
  const std::string act = "gemm(M=16,N=256,K=4096,regime=activations,dtype=bf16,seed=0)";
  const std::string bias = "gemm(M=1,N=512,K=2050,bias=1,regime=activations,dtype=bf16,seed=0)";
  const std::string cancel = "gemm(M=8,N=256,K=1000,regime=cancel,dtype=f32,seed=0)";
  const std::string wide = "gemm(M=4,N=200,K=1000,regime=wide_range,dtype=f32,seed=0)";
  const std::string outlier = "gemm(M=8,N=256,K=2048,regime=outlier_k,dtype=bf16,seed=0)";
  check_variants("gemm_cpu_naive_f32", {act, bias, cancel, wide, outlier},
                 {{"gemm_mutant_acc_bf16", outlier},
                  {"gemm_mutant_acc_f16", act},
                  {"gemm_mutant_bias_twice", bias},
                  {"gemm_mutant_bias_dropped", bias},
                  {"gemm_mutant_w_transposed", act},
                  {"gemm_mutant_k_tail_dropped", bias},
                  {"gemm_mutant_split_k_bf16", cancel},
                  {"gemm_mutant_inputs_f16", wide}},
                 4);
}

}  // namespace
}  // namespace dg
