// Mutants and equivalent variants of decode_layer: decode_layer_cpu_chain_f32 (candidates/cpu/
// decode_layer.cpp) with one change each, a bug of the layer's composition (the ops themselves are
// their own mutants' business):
//   mutant_residual_twice       the layer's input added again to its output (a fused add_rmsnorm has
//                               already updated the residual, and the caller adds it too)
//   mutant_no_attn_residual     the residual add before the MoE skipped: h = attention output
//   mutant_norm_before_add      the MoE reads rmsnorm(attention output) instead of rmsnorm(x + attention)
//   mutant_biased_weights       the experts weighted by the biased selection scores s + b
//   mutant_state_not_carried    the KDA state not written back between steps (every step starts from h0)
//   mutant_conv_not_carried     the conv states not written back between steps
//   mutant_bf16_residual        the residual stream rounded to bf16 between the attention and the MoE
//   mutant_bf16_state           the KDA state stored in bf16 between steps (the state that drifts)
//   mutant_bf16_router_logits   the router GEMM's logits rounded to bf16 (vLLM's Kimi gate runs in the
//                               model dtype; GLM's is an f32 nn.Linear): weights off by 2^-9, near-ties flip
//   mutant_mla_latent_scale     kind=mla: the softmax scaled by dc^-0.5 (1/sqrt(512), the latent's width)
//                               instead of dn^-0.5 (1/16, the expanded head's)
//   mutant_mla_append_after     kind=mla: the token's latent row written after its attention: the step
//                               reads the slot's stale row (zeros) in place of its own
//   mutant_mla_no_kv_norm       kind=mla: kv_a's output cached and attended without kv_a_layernorm
//   mutant_mla_uk_untransposed  kind=mla: W_UK,h's [dn, dc] block read as a [dc, dn] matrix (a view
//                               where the absorption needs its transpose)
// Equivalent rewrites that must merge:
//   equivalent_blocked_kernels  the chain on the optimized CPU kernels (blocked norms and GEMMs, the
//                               grouped router, the packed split-KV mla_decode)
//   equivalent_per_token_experts the routed experts run token by token instead of grouped by expert
//   equivalent_f64_residual     the residual adds in double, rounded once to f32
#include <string>

#include "candidates/cpu/decode_layer.h"
#include "harness/cases/registry.h"

namespace dg {
namespace {

using decode_layer_cpu::Chain;

struct Add {
  Add(const char* kind, const char* what, const char* doc, Chain ch) {
    register_candidate({std::string("decode_layer_") + kind + "_" + what, "decode_layer", "cpu", kind, DType::f32, DType::f32,
                        DType::f32, doc},
                       [ch](const Case& c, const TensorMap& in, TensorMap& out) { decode_layer_cpu::step(ch, c, in, out); });
  }
};

const Add twice("mutant", "residual_twice", "the layer's input added again to its output", {.residual_twice = true});
const Add no_res("mutant", "no_attn_residual", "the residual add before the MoE skipped: h = attention output",
                 {.no_attn_residual = true});
const Add prenorm("mutant", "norm_before_add", "the MoE reads rmsnorm(attention output), not rmsnorm(x + attention)",
                  {.norm_before_add = true});
const Add biased("mutant", "biased_weights", "expert weights from the biased selection scores s + b", {.biased_weights = true});
const Add state("mutant", "state_not_carried", "the KDA state not written back between steps", {.reset_state = true});
const Add conv("mutant", "conv_not_carried", "the conv states not written back between steps", {.reset_conv = true});
const Add res16("mutant", "bf16_residual", "the residual stream rounded to bf16 between the attention and the MoE",
                {.bf16_residual = true});
const Add state16("mutant", "bf16_state", "the KDA state stored in bf16 between steps", {.bf16_state = true});
const Add router16("mutant", "bf16_router_logits", "the router GEMM's logits rounded to bf16 (GLM's gate is f32)",
                   {.bf16_router = true});
const Add mla_scale("mutant", "mla_latent_scale", "kind=mla: softmax scale dc^-0.5 instead of dn^-0.5 (1/16)",
                    {.mla_latent_scale = true});
const Add mla_after("mutant", "mla_append_after", "kind=mla: the token's latent row written after its attention",
                    {.mla_append_after = true});
const Add mla_norm("mutant", "mla_no_kv_norm", "kind=mla: the latent cached without kv_a_layernorm", {.mla_no_kv_norm = true});
const Add mla_uk("mutant", "mla_uk_untransposed", "kind=mla: W_UK,h read as [dc, dn] without its transpose",
                 {.mla_uk_untransposed = true});
const Add eq_blocked("equivalent", "blocked_kernels", "the chain on the optimized CPU kernels", decode_layer_cpu::blocked());
const Add eq_tokens("equivalent", "per_token_experts", "the routed experts run token by token", {.per_token_experts = true});
const Add eq_f64("equivalent", "f64_residual", "the residual adds in double, rounded once to f32", {.f64_residual = true});

}  // namespace
}  // namespace dg
