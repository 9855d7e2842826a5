// The mla_decode mutants and equivalent variants (candidates/mutants/mla_decode.cpp), judged in
// this process against the packed candidate: each mutant is rejected on the case named for it, each
// equivalent variant merges on every case.
#include <gtest/gtest.h>

#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

TEST(MlaDecodeMutants, EachIsRejectedWhereItsBugShowsAndRewritesMerge) {
  const std::string nope = "mla_decode(B=3,n_h=8,d_c=512,rope=0,page=64,split=3,ctx=300,regime=typical,dtype=bf16,seed=0)";
  const std::string rope = "mla_decode(B=2,n_h=8,d_c=512,rope=64,page=16,split=3,ctx=300,regime=typical,dtype=bf16,seed=0)";
  const std::string empty = "mla_decode(B=4,n_h=4,d_c=512,rope=0,page=64,split=8,ctx=200,regime=empty_splits,dtype=bf16,seed=0)";
  const std::string large = "mla_decode(B=2,n_h=8,d_c=512,rope=64,page=64,split=2,ctx=256,regime=large_logits,dtype=bf16,seed=0)";
  const std::string sparse = "mla_decode(B=5,n_h=4,d_c=512,rope=64,page=16,split=3,ctx=300,topk=128,regime=sparse_mixed,dtype=bf16,seed=0)";
  const std::string fp8 = "mla_decode(B=2,n_h=8,d_c=512,rope=64,page=64,split=3,ctx=300,kv=fp8,kv_scale=0.037,regime=typical,dtype=bf16,seed=0)";
  check_variants("mla_decode_cpu_packed_f32", {nope, rope, empty, large, sparse, fp8},
                 {{"mla_decode_mutant_merge_no_max", large},
                  {"mla_decode_mutant_lse_bf16", nope},
                  {"mla_decode_mutant_empty_unguarded", empty},
                  {"mla_decode_mutant_no_rescale", nope},
                  {"mla_decode_mutant_p_bf16", nope},
                  {"mla_decode_mutant_lse_base2", nope},
                  {"mla_decode_mutant_last_key_dropped", nope},
                  {"mla_decode_mutant_scale_head_dim", nope},
                  {"mla_decode_mutant_rope_dropped", rope},
                  {"mla_decode_mutant_value_rope_first", rope},
                  {"mla_decode_mutant_invalid_as_zero", sparse},
                  {"mla_decode_mutant_beyond_unmasked", sparse},
                  {"mla_decode_mutant_slot_off_by_one", rope},
                  {"mla_decode_mutant_v_unscaled", fp8}},
                 5);
}

}  // namespace
}  // namespace dg
