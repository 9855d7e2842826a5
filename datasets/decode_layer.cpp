// Input regimes and suites of decode_layer (one GLM-5.3-Flash decoder layer at decode;
// harness/ops/decode_layer.cpp). Stored dtypes as the production layer keeps them: the hidden states
// and the projection, expert and norm weights in the case's dtype; the conv weights and states,
// A_log, dt_bias, the KDA state, its norm weight and the router (gate and correction bias) in f32.
//
// Weights as each op's own regimes draw them: linear layers ~ N(0, 1/fan_in) (so every projection's
// output is about unit scale), conv weights ~ U(-1/sqrt(W), 1/sqrt(W)), norm weights ~ 1 + N(0, 0.1),
// the correction bias ~ N(0, 0.1^2) (datasets/moe_router.cpp), GLM-5.3-Flash's gate A_log = 0 with
// dt_bias as kda_decode_fused's glm_safe_gate draws it, and random conv states and h0 (a layer
// mid-sequence).
#include <cmath>

#include "datasets/dists.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/ops/decode_layer.h"

namespace dg {
namespace {

using namespace dists;

enum class Hidden { normal, massive, long_memory };

Dist linear_init(int64_t fan_in) { return normal(1.0 / std::sqrt(static_cast<double>(fan_in))); }
Dist norm_weight() { return map(normal(0.1), [](double z) { return 1.0 + z; }); }

// The MLA layer's attention weights and its latent cache: c_kv of earlier tokens as kv_norm leaves
// them (unit rms times a norm weight ~ 1 + N(0, 0.1)).
void mla_generate(const Case& c, TensorMap& in) {
  const DecodeLayerParams p = decode_layer_params(c);
  const DType dt = p.dtype;
  make(in, c, "w_qa", dt, {p.ql, p.D}, linear_init(p.D));
  make(in, c, "q_norm", dt, {p.ql}, norm_weight());
  make(in, c, "w_qb", dt, {p.H * p.dn, p.ql}, linear_init(p.ql));
  make(in, c, "w_kva", dt, {p.dc, p.D}, linear_init(p.D));
  make(in, c, "kv_norm", dt, {p.dc}, norm_weight());
  make(in, c, "w_kvb", dt, {p.H * p.kvb_rows(), p.dc}, linear_init(p.dc));
  make(in, c, "w_o", dt, {p.D, p.H * p.dv}, linear_init(p.H * p.dv));
  make(in, c, "kv0", dt, {p.B, p.ctx, p.dc}, normal());
}

void layer_generate(const Case& c, TensorMap& in, Hidden h) {
  const DecodeLayerParams p = decode_layer_params(c);
  const DType dt = p.dtype, f32 = DType::f32;
  const int64_t D = p.D, HK = p.HK(), S = p.W - 1;
  make(in, c, "x", dt, {p.B, p.T, D}, h == Hidden::massive ? massive_channels(D, 1.0) : normal());
  make(in, c, "in_norm", dt, {D}, norm_weight());
  make(in, c, "post_norm", dt, {D}, norm_weight());
  make(in, c, "w_router", f32, {p.E, D}, linear_init(D));
  make(in, c, "router_bias", f32, {p.E}, normal(0.1));
  make(in, c, "w_gu", dt, {p.E, 2 * p.I, D}, linear_init(D));
  make(in, c, "w_down", dt, {p.E, D, p.I}, linear_init(p.I));
  make(in, c, "ws_gu", dt, {2 * p.I, D}, linear_init(D));
  make(in, c, "ws_down", dt, {D, p.I}, linear_init(p.I));
  if (p.kind == "mla") {
    if (h == Hidden::long_memory) throw InputError("decode_layer: the long_memory regime is the KDA layer's (kind=linear)");
    return mla_generate(c, in);
  }
  make(in, c, "w_in", dt, {p.n_in(), D}, linear_init(D));
  for (const char* w : {"wq", "wk", "wv"}) make(in, c, w, f32, {HK, p.W}, fan_in_uniform(p.W));
  for (const char* s : {"conv_q0", "conv_k0", "conv_v0"}) make(in, c, s, f32, {p.B, HK, S}, normal());
  make(in, c, "A_log", f32, {p.H}, constant(0.0));
  // long_memory: f + dt_bias near -10, so g = -5 sigmoid(.) is about -2e-4 and the state carries
  // every step's rounding on; otherwise dt_bias = dt + log(-expm1(-dt)), dt ~ logU[1e-3, 1e-1].
  make(in, c, "dt_bias", f32, {HK},
       h == Hidden::long_memory ? uniform(-11.0, -9.0) : map(uniform(std::log(1e-3), std::log(1e-1)), [](double u) {
         const double d = std::exp(u);
         return d + std::log(-std::expm1(-d));
       }));
  make(in, c, "h0", f32, {p.B, p.H, p.K, p.K}, normal());
  make(in, c, "nweight", f32, {p.K}, norm_weight());
  make(in, c, "w_o", dt, {D, HK}, linear_init(HK));
}

}  // namespace

DG_REGISTER_REGIME(decode_layer_glm_flash,
                   Regime{"glm_flash", "decode_layer",
                          "GLM-5.3-Flash's KDA layer: x ~ N(0,1), linear weights ~ N(0, 1/fan_in), safe gate (A_log = 0), "
                          "random conv states and h0, correction bias ~ N(0, 0.1^2)",
                          {},
                          [](const Case& c, TensorMap& in) { layer_generate(c, in, Hidden::normal); }});

DG_REGISTER_REGIME(decode_layer_massive,
                   Regime{"massive_residual", "decode_layer",
                          "glm_flash with massive activations in the residual stream (two channels of 100-400 sd): "
                          "the layer's update is small beside x, where a residual rounded to bf16 shows",
                          {},
                          [](const Case& c, TensorMap& in) { layer_generate(c, in, Hidden::massive); }});

DG_REGISTER_REGIME(decode_layer_long_memory,
                   Regime{"long_memory", "decode_layer",
                          "glm_flash with dt_bias ~ U[-11, -9]: decay about 2e-4 per step, the KDA state keeps every step",
                          {},
                          [](const Case& c, TensorMap& in) { layer_generate(c, in, Hidden::long_memory); }});

DG_REGISTER_SUITE(decode_layer_smoke,
                  Suite{"decode-layer-smoke", "small KDA and MLA decode layers: every regime and dtype (seconds)",
                        {
                            "decode_layer(kind=linear,T=4,B=2,D=256,H=2,K=64,E=8,k=2,I=128,regime=glm_flash,dtype=bf16,seed=0)",
                            "decode_layer(kind=linear,T=1,B=1,D=128,H=1,K=32,E=4,k=1,I=64,regime=massive_residual,dtype=bf16,seed=0)",
                            "decode_layer(kind=linear,T=6,B=2,D=128,H=2,K=32,E=4,k=2,I=64,regime=long_memory,dtype=f32,seed=0)",
                            "decode_layer(kind=mla,T=3,B=2,D=64,H=2,K=64,E=4,k=2,I=32,ql=48,dc=32,dn=16,dv=16,ctx=5,regime=glm_flash,dtype=bf16,seed=0)",
                        }});

DG_REGISTER_SUITE(decode_layer_gate,
                  Suite{"decode-layer-gate",
                        "the decode_layer merge gate: carried states over 16-32 steps, odd shapes, massive residuals, one step; MLA layers over 8 steps and from an empty cache",
                        {
                            "decode_layer(kind=linear,T=16,B=4,D=256,H=2,K=64,E=8,k=2,I=128,regime=glm_flash,dtype=bf16,seed=0)",
                            "decode_layer(kind=linear,T=8,B=2,D=384,H=3,K=40,E=16,k=4,I=96,regime=massive_residual,dtype=bf16,seed=0)",
                            "decode_layer(kind=linear,T=32,B=1,D=256,H=2,K=64,E=8,k=2,I=128,regime=long_memory,dtype=f32,seed=0)",
                            "decode_layer(kind=linear,T=1,B=8,D=256,H=4,K=32,E=8,k=4,I=64,regime=glm_flash,dtype=bf16,seed=0)",
                            "decode_layer(kind=mla,T=8,B=2,D=128,H=4,K=64,E=8,k=2,I=64,ql=96,dc=64,dn=32,dv=24,ctx=20,regime=glm_flash,dtype=bf16,seed=0)",
                            "decode_layer(kind=mla,T=4,B=3,D=128,H=2,K=64,E=8,k=4,I=64,ql=64,dc=128,dn=64,dv=32,ctx=0,regime=massive_residual,dtype=f32,seed=0)",
                        }});

}  // namespace dg
