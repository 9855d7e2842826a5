// The chain of decode_layer (candidates/cpu/decode_layer.cpp): one decode step of the layer as the
// registered CPU candidates of its ops, called in the layer's order on their own cases, with f32
// values between them. The candidates and mutants of decode_layer are chains with other kernels or
// one deliberate change (Chain).
#pragma once

#include <string>

#include "harness/cases/registry.h"

namespace dg::decode_layer_cpu {

// What a chain runs: the candidate of each op, and the changes of the mutants and equivalent
// variants (candidates/mutants/decode_layer.cpp); the default is decode_layer_cpu_chain_f32.
struct Chain {
  std::string norm = "rmsnorm_cpu_naive_f32";
  std::string add_norm = "add_rmsnorm_cpu_naive_f32";
  std::string gemm = "gemm_cpu_naive_f32";
  std::string kda = "kda_decode_fused_cpu_f32";
  std::string router = "moe_router_cpu_naive_f32";
  std::string swiglu = "swiglu_cpu_naive_f32";
  std::string combine = "moe_combine_cpu_naive_f32";
  std::string mla = "mla_decode_cpu_naive_f32";
  bool residual_twice = false;       // y = h + moe + x: the layer input added again at the end
  bool no_attn_residual = false;     // h = attention output: the residual add before the MoE skipped
  bool norm_before_add = false;      // the MoE reads rmsnorm(attention output), not rmsnorm(x + attention)
  bool biased_weights = false;       // expert weights from the biased selection scores s + b
  bool reset_state = false;          // the KDA state not written back between steps
  bool reset_conv = false;           // the conv states not written back between steps
  bool bf16_residual = false;        // the residual stream h rounded to bf16 between the attention and the MoE
  bool bf16_state = false;           // the KDA state stored in bf16 between steps (ATOM's opt-in bf16 state)
  bool bf16_router = false;          // the router GEMM's logits rounded to bf16 (a gate in the model dtype)
  bool per_token_experts = false;    // the experts run token by token (M = 1) instead of grouped by expert
  bool f64_residual = false;         // the residual adds in double, rounded once to f32
  // kind=mla
  bool mla_latent_scale = false;     // softmax scale dc^-0.5 (1/sqrt(512)) instead of dn^-0.5 (1/16)
  bool mla_append_after = false;     // the token's latent row written after its attention (it reads a stale row)
  bool mla_no_kv_norm = false;       // kv_a's output cached without kv_norm
  bool mla_uk_untransposed = false;  // W_UK,h's [dn, dc] block read as [dc, dn] (a view, not a transpose)
};

// The chain on the optimized CPU kernels (decode_layer_cpu_blocked_f32): the blocked norms and GEMMs,
// the grouped router.
Chain blocked();

// One step (T = 1) of the layer for the B tokens of `in` ("x" [B,1,D], the weights, state_indices)
// against the pools of `out` ("state", "conv_q", "conv_k", "conv_v"; kind=mla: "latent", whose
// rows [0, ctx) are cached and row ctx is this step's), writing "y" [B,1,D].
void step(const Chain& chain, const Case& c, const TensorMap& in, TensorMap& out);

}  // namespace dg::decode_layer_cpu
