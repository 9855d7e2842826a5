// Input regimes of causal_conv1d (the short conv before KDA's q, k, v; notes/model-ops.md section
// 1.5). Stored dtypes: x in the case's dtype; weights and conv states in f32 (as the production layer
// keeps them). Its suite is layer-smoke, with the other ops of the layer (datasets/suites.cpp).
//
// Weights: conv weights ~ U(-1/sqrt(W), 1/sqrt(W)) (PyTorch's conv1d initialisation, fan-in W).
#include <utility>

#include "datasets/dists.h"
#include "harness/ops/causal_conv1d.h"
#include "harness/cases/registry.h"

namespace dg {
namespace {

using namespace dists;

void conv_generate(const Case& c, TensorMap& in, bool cancel) {
  ConvParams p = conv_params(c);
  if (!cancel) {
    make(in, c, "x", c.dtype(), {p.B, p.T, p.D}, normal());
    make(in, c, "weight", DType::f32, {p.D, p.W}, fan_in_uniform(p.W));
  } else {
    // x_t[d] = 1 + 1e-3 N(0,1): the sum of W products cancels to about 1e-3 of its terms
    make(in, c, "x", c.dtype(), {p.B, p.T, p.D}, map(normal(1e-3), [](double z) { return 1.0 + z; }));
    Tensor w(DType::f32, {p.D, p.W});
    fill(w, c, "weight", fan_in_uniform(p.W));
    for (int64_t d = 0; d < p.D; ++d) {   // make each channel's weights sum to ~0 (last tap = -sum of the others)
      double s = 0;
      for (int64_t k = 0; k + 1 < p.W; ++k) s += w.get(d * p.W + k);
      if (p.W > 1) w.set(d * p.W + p.W - 1, -s);
    }
    in["weight"] = std::move(w);
  }
  if (c.boolean("state")) make(in, c, "state0", DType::f32, {p.B, p.D, p.W - 1}, cancel ? constant(1.0) : normal());
}

}  // namespace

DG_REGISTER_REGIME(kimi_linear,
                   Regime{"kimi_linear", "causal_conv1d",
                          "pre-conv projections x ~ N(0,1), weights ~ U(+-1/sqrt(W)), conv state ~ N(0,1)", {},
                          [](const Case& c, TensorMap& in) { conv_generate(c, in, false); }});

DG_REGISTER_REGIME(cancel,
                   Regime{"cancel", "causal_conv1d",
                          "x = 1 + 1e-3 N(0,1) and each channel's weights summing to zero: the W products cancel to "
                          "1e-3 of their size, so the accumulation order and precision show (x in f32 by default: bf16 "
                          "would round it to 1)",
                          {{"dtype", "f32"}}, [](const Case& c, TensorMap& in) { conv_generate(c, in, true); }});

}  // namespace dg
