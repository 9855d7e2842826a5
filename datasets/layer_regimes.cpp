// Input regimes of causal_conv1d, rmsnorm_gated and kda_decode_fused (the layer around KDA,
// notes/model-ops.md section 1.5). Stored dtypes: activations in the case's dtype; weights, conv
// states, A_log, dt_bias and h0 in f32 (as the production layer keeps them).
//
// Weights: conv weights ~ U(-1/sqrt(W), 1/sqrt(W)) (PyTorch's conv1d initialisation, fan-in W); the
// norm weight ~ 1 + N(0, 0.1) (initialised to ones, trained away from them).
#include <cmath>

#include "datasets/dists.h"
#include "harness/ops/kda_op.h"
#include "harness/ops/layer_ops.h"
#include "harness/cases/registry.h"

namespace dg {
namespace {

using namespace dists;

void make(TensorMap& in, const Case& c, const std::string& name, DType dt, std::vector<int64_t> shape, const Dist& d) {
  Tensor t(dt, std::move(shape));
  fill(t, c, name, d);
  in[name] = std::move(t);
}

Dist conv_weight(int64_t W) {
  const double a = 1.0 / std::sqrt(static_cast<double>(W));
  return uniform(-a, a);
}

// --- causal_conv1d --------------------------------------------------------------------------------
struct ConvRegime {
  const char* name;
  const char* doc;
  bool cancel;   // x nearly constant in time and weights summing to ~0
};

void conv_generate(const Case& c, TensorMap& in, bool cancel) {
  ConvParams p = conv_params(c);
  if (!cancel) {
    make(in, c, "x", c.dtype(), {p.B, p.T, p.D}, normal());
    make(in, c, "weight", DType::f32, {p.D, p.W}, conv_weight(p.W));
  } else {
    // x_t[d] = 1 + 1e-3 N(0,1): the sum of W products cancels to about 1e-3 of its terms
    make(in, c, "x", c.dtype(), {p.B, p.T, p.D}, map(normal(1e-3), [](double z) { return 1.0 + z; }));
    Tensor w(DType::f32, {p.D, p.W});
    fill(w, c, "weight", conv_weight(p.W));
    for (int64_t d = 0; d < p.D; ++d) {   // make each channel's weights sum to ~0 (last tap = -sum of the others)
      double s = 0;
      for (int64_t k = 0; k + 1 < p.W; ++k) s += w.get(d * p.W + k);
      if (p.W > 1) w.set(d * p.W + p.W - 1, -s);
    }
    in["weight"] = std::move(w);
  }
  if (c.boolean("state")) make(in, c, "state0", DType::f32, {p.B, p.D, p.W - 1}, cancel ? constant(1.0) : normal());
}

// --- rmsnorm_gated --------------------------------------------------------------------------------
void norm_generate(const Case& c, TensorMap& in, double x_sd, double gate_sd) {
  NormParams p = norm_params(c);
  make(in, c, "x", c.dtype(), {p.N, p.D}, normal(x_sd));
  make(in, c, "gate", c.dtype(), {p.N, p.D}, normal(gate_sd));
  make(in, c, "weight", DType::f32, {p.D}, map(normal(0.1), [](double z) { return 1.0 + z; }));
}

// --- kda_decode_fused -----------------------------------------------------------------------------
enum class Gate { kimi, glm, long_memory };

void fused_generate(const Case& c, TensorMap& in, Gate gate) {
  const KdaParams p = kda_params(c);
  const int64_t W = c.integer("W"), Cq = p.H * p.K, Cv = p.HV * p.V;
  const DType dt = c.dtype();
  make(in, c, "xq", dt, {p.B, p.T, p.H, p.K}, normal());
  make(in, c, "xk", dt, {p.B, p.T, p.H, p.K}, normal());
  make(in, c, "xv", dt, {p.B, p.T, p.HV, p.V}, normal());
  make(in, c, "wq", DType::f32, {Cq, W}, conv_weight(W));
  make(in, c, "wk", DType::f32, {Cq, W}, conv_weight(W));
  make(in, c, "wv", DType::f32, {Cv, W}, conv_weight(W));
  make(in, c, "conv_q0", DType::f32, {p.B, Cq, W - 1}, normal());
  make(in, c, "conv_k0", DType::f32, {p.B, Cq, W - 1}, normal());
  make(in, c, "conv_v0", DType::f32, {p.B, Cv, W - 1}, normal());
  make(in, c, "ogate", dt, {p.B, p.T, p.HV, p.V}, normal());
  make(in, c, "nweight", DType::f32, {p.V}, map(normal(0.1), [](double z) { return 1.0 + z; }));
  // g and beta: stored raw (in-op gate and sigmoid beta) for the production gates; pregated g and
  // given beta for long_memory, as the kda regimes of the same names draw them.
  if (gate == Gate::long_memory) {
    make(in, c, "g", dt, {p.B, p.T, p.HV, p.K}, p.gate == KdaGate::pregated ? uniform(-1e-4, 0.0) : normal());
    make(in, c, "beta", dt, {p.B, p.T, p.HV}, p.beta == KdaBeta::given ? uniform(1e-3, 1e-2) : normal());
  } else {
    make(in, c, "g", dt, {p.B, p.T, p.HV, p.K}, p.gate == KdaGate::pregated ? map(normal(), logsigmoid) : normal());
    make(in, c, "beta", dt, {p.B, p.T, p.HV}, p.beta == KdaBeta::given ? map(normal(), sigmoid) : normal());
  }
  if (p.gate != KdaGate::pregated) {
    if (p.use_A_log)
      make(in, c, "A_log", DType::f32, {p.HV},
           gate == Gate::glm ? constant(0.0) : map(uniform(1.0, 16.0), [](double u) { return std::log(u); }));
    make(in, c, "dt_bias", DType::f32, {p.HV * p.K}, map(uniform(std::log(1e-3), std::log(1e-1)), [](double u) {
           const double dt = std::exp(u);
           return dt + std::log(-std::expm1(-dt));
         }));
  }
  if (p.has_h0) {
    std::vector<int64_t> s = p.state_v_first ? std::vector<int64_t>{p.B, p.HV, p.V, p.K}
                                             : std::vector<int64_t>{p.B, p.HV, p.K, p.V};
    make(in, c, "h0", DType::f32, s, normal());
  }
}

struct RegisterLayerRegimes {
  RegisterLayerRegimes() {
    register_regime({"kimi_linear", "causal_conv1d",
                     "pre-conv projections x ~ N(0,1), weights ~ U(+-1/sqrt(W)), conv state ~ N(0,1)", {},
                     [](const Case& c, TensorMap& in) { conv_generate(c, in, false); }});
    register_regime({"cancel", "causal_conv1d",
                     "x = 1 + 1e-3 N(0,1) and each channel's weights summing to zero: the W products cancel to "
                     "1e-3 of their size, so the accumulation order and precision show (x in f32 by default: bf16 "
                     "would round it to 1)",
                     {{"dtype", "f32"}}, [](const Case& c, TensorMap& in) { conv_generate(c, in, true); }});
    register_regime({"kimi_linear", "rmsnorm_gated",
                     "KDA outputs x ~ N(0, 0.05^2), output gate ~ N(0,1), weight ~ 1 + N(0, 0.1)", {},
                     [](const Case& c, TensorMap& in) { norm_generate(c, in, 0.05, 1.0); }});
    register_regime({"tiny_rms", "rmsnorm_gated",
                     "x ~ N(0, 1e-3^2): mean(x^2) = 1e-6 is below eps = 1e-5, which then sets the scale", {},
                     [](const Case& c, TensorMap& in) { norm_generate(c, in, 1e-3, 1.0); }});
    register_regime({"saturated_gate", "rmsnorm_gated",
                     "output gate ~ N(0, 30^2): sigmoid saturates at 0 and 1 (exp overflow in a naive form)", {},
                     [](const Case& c, TensorMap& in) { norm_generate(c, in, 0.05, 30.0); }});
    register_regime({"kimi_linear", "kda_decode_fused",
                     "Kimi Linear's decode layer: softplus gate and sigmoid beta in-op, x ~ N(0,1) before the conv, "
                     "random conv states and h0",
                     {{"gate", "softplus"}, {"beta", "sigmoid"}, {"h0", "1"}},
                     [](const Case& c, TensorMap& in) { fused_generate(c, in, Gate::kimi); }});
    register_regime({"glm_safe_gate", "kda_decode_fused",
                     "GLM-5.3-Flash's decode layer: lower-bound gate -5 sigmoid(f + dt_bias) (A_log = 0), sigmoid beta",
                     {{"gate", "lower_bound"}, {"lb", "-5"}, {"beta", "sigmoid"}, {"h0", "1"}},
                     [](const Case& c, TensorMap& in) { fused_generate(c, in, Gate::glm); }});
    register_regime({"long_memory", "kda_decode_fused",
                     "g ~ U[-1e-4, 0], beta ~ U[1e-3, 1e-2], a carried state: rounding accumulates over the steps",
                     {{"h0", "1"}}, [](const Case& c, TensorMap& in) { fused_generate(c, in, Gate::long_memory); }});
  }
};
const RegisterLayerRegimes register_layer_regimes;

}  // namespace
}  // namespace dg
