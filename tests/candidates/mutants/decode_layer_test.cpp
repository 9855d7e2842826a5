// decode_layer's mutants and equivalent variants (candidates/mutants/decode_layer.cpp): each mutant
// rejected on a case that exercises it, each equivalent merged on every case.
#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

const char* kGlm = "decode_layer(kind=linear,T=8,B=2,D=64,H=2,K=16,E=4,k=2,I=32,regime=glm_flash,dtype=bf16,seed=0)";
const char* kMla = "decode_layer(kind=mla,T=4,B=2,D=64,H=2,K=64,E=4,k=2,I=32,ql=48,dc=32,dn=16,dv=16,ctx=3,regime=glm_flash,dtype=bf16,seed=0)";
const char* kLong = "decode_layer(kind=linear,T=16,B=1,D=64,H=2,K=16,E=4,k=2,I=32,regime=long_memory,dtype=f32,seed=0)";

TEST(DecodeLayerMutants, EveryMutantIsKilledAndEveryEquivalentMerges) {
  check_variants("decode_layer_cpu_chain_f32", {kGlm, kLong, kMla},
                 {{"decode_layer_mutant_residual_twice", kGlm},
                  {"decode_layer_mutant_no_attn_residual", kGlm},
                  {"decode_layer_mutant_norm_before_add", kGlm},
                  {"decode_layer_mutant_biased_weights", kGlm},
                  {"decode_layer_mutant_state_not_carried", kLong},
                  {"decode_layer_mutant_conv_not_carried", kGlm},
                  {"decode_layer_mutant_bf16_residual", kLong},
                  {"decode_layer_mutant_bf16_state", kLong},
                  {"decode_layer_mutant_bf16_router_logits", kGlm},
                  {"decode_layer_mutant_mla_latent_scale", kMla},
                  {"decode_layer_mutant_mla_append_after", kMla},
                  {"decode_layer_mutant_mla_no_kv_norm", kMla},
                  {"decode_layer_mutant_mla_uk_untransposed", kMla}},
                 3);
}

}  // namespace
}  // namespace dg
