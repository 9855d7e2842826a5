// Input regimes of kda_decode_fused (the decode layer around KDA: conv, KDA step, gated norm;
// notes/model-ops.md section 1.5). Stored dtypes: activations in the case's dtype; weights, conv
// states, A_log, dt_bias and h0 in f32 (as the production layer keeps them). Its suites are
// layer-smoke and kda-decode-gpu, with other ops (datasets/suites.cpp).
//
// Weights as the ops' own regimes draw them: conv weights ~ U(-1/sqrt(W), 1/sqrt(W)) (PyTorch's
// conv1d initialisation, fan-in W); the norm weight ~ 1 + N(0, 0.1) (initialised to ones, trained
// away from them).
#include <cmath>

#include "datasets/dists.h"
#include "harness/ops/kda.h"
#include "harness/cases/registry.h"

namespace dg {
namespace {

using namespace dists;

enum class Gate { kimi, glm, long_memory };

void fused_generate(const Case& c, TensorMap& in, Gate gate) {
  const KdaParams p = kda_params(c);
  const int64_t W = c.integer("W"), Cq = p.H * p.K, Cv = p.HV * p.V;
  const DType dt = c.dtype();
  make(in, c, "xq", dt, {p.B, p.T, p.H, p.K}, normal());
  make(in, c, "xk", dt, {p.B, p.T, p.H, p.K}, normal());
  make(in, c, "xv", dt, {p.B, p.T, p.HV, p.V}, normal());
  make(in, c, "wq", DType::f32, {Cq, W}, fan_in_uniform(W));
  make(in, c, "wk", DType::f32, {Cq, W}, fan_in_uniform(W));
  make(in, c, "wv", DType::f32, {Cv, W}, fan_in_uniform(W));
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

}  // namespace

DG_REGISTER_REGIME(kimi_linear,
                   Regime{"kimi_linear", "kda_decode_fused",
                          "Kimi Linear's decode layer: softplus gate and sigmoid beta in-op, x ~ N(0,1) before the conv, "
                          "random conv states and h0",
                          {{"gate", "softplus"}, {"beta", "sigmoid"}, {"h0", "1"}},
                          [](const Case& c, TensorMap& in) { fused_generate(c, in, Gate::kimi); }});

DG_REGISTER_REGIME(glm_safe_gate,
                   Regime{"glm_safe_gate", "kda_decode_fused",
                          "GLM-5.3-Flash's decode layer: lower-bound gate -5 sigmoid(f + dt_bias) (A_log = 0), sigmoid beta",
                          {{"gate", "lower_bound"}, {"lb", "-5"}, {"beta", "sigmoid"}, {"h0", "1"}},
                          [](const Case& c, TensorMap& in) { fused_generate(c, in, Gate::glm); }});

DG_REGISTER_REGIME(long_memory,
                   Regime{"long_memory", "kda_decode_fused",
                          "g ~ U[-1e-4, 0], beta ~ U[1e-3, 1e-2], a carried state: rounding accumulates over the steps",
                          {{"h0", "1"}}, [](const Case& c, TensorMap& in) { fused_generate(c, in, Gate::long_memory); }});

}  // namespace dg
