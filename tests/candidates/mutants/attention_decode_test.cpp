// The attention_decode mutants and equivalent variants (candidates/mutants/attention_decode.cpp),
// judged in this process against the split-KV candidate: each mutant is rejected on the case named
// for it, each equivalent variant merges on every case.
#include <gtest/gtest.h>

#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

TEST(AttentionDecodeMutants, EachIsRejectedWhereItsBugShowsAndRewritesMerge) {
  const std::string typical = "attention_decode(B=3,n_h=8,n_kv=2,d=128,page=16,split=7,ctx=300,regime=typical,dtype=bf16,seed=0)";
  const std::string ragged = "attention_decode(B=5,n_h=4,n_kv=4,d=64,page=16,split=3,ctx=200,regime=ragged,dtype=bf16,seed=0)";
  const std::string large = "attention_decode(B=2,n_h=8,n_kv=2,d=128,page=16,split=2,ctx=256,regime=large_logits,dtype=bf16,seed=0)";
  const std::string dims = "attention_decode(B=2,n_h=4,n_kv=2,d=192,dv=128,page=16,split=2,ctx=100,lens=100/37,regime=typical,dtype=f32,seed=0)";
  const std::string fp8 = "attention_decode(B=2,n_h=8,n_kv=2,d=128,page=16,split=3,ctx=500,kv=fp8,k_scale=0.037,v_scale=0.021,regime=typical,dtype=bf16,seed=0)";
  check_variants("attention_decode_cpu_splitkv_f32", {typical, ragged, large, dims, fp8},
                 {{"attention_decode_mutant_merge_no_max", large},
                  {"attention_decode_mutant_lse_bf16", typical},
                  {"attention_decode_mutant_empty_unguarded", ragged},
                  {"attention_decode_mutant_scale_dv", dims},
                  {"attention_decode_mutant_scale_twice", typical},
                  {"attention_decode_mutant_p_bf16", typical},
                  {"attention_decode_mutant_lse_base2", typical},
                  {"attention_decode_mutant_gqa_mod", typical},
                  {"attention_decode_mutant_partial_page_dropped", ragged},
                  {"attention_decode_mutant_last_token_dropped", typical},
                  {"attention_decode_mutant_no_rescale", typical},
                  {"attention_decode_mutant_kv_scales_swapped", fp8}},
                 4);
}

}  // namespace
}  // namespace dg
