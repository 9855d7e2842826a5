// Input regimes and suites of swiglu (reference/swiglu.h; notes/model-ops.md sections 1.7, 2 and 5).
// The input row is the gate/up projection [gate | up], stored in the case's dtype. Widths from the
// configs: routed experts' I = 1024 (Kimi-Linear), 1408 (GLM-4.5-Air), 1536 (GLM-4.5/4.6/4.7), 2048
// (GLM-5.x, GLM-5.3-Flash); dense MLPs' 9216-12288.
#include <cmath>
#include <cstdint>

#include "datasets/dists.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/ops/swiglu.h"

namespace dg {
namespace {

using namespace dists;

// Row n of x is [gate_n | up_n]: element j < I draws from `gate`, j >= I from `up` (one stream).
Dist halves(int64_t I, Dist gate, Dist up) {
  return [I, gate = std::move(gate), up = std::move(up)](const TensorRng& r, uint64_t i0, std::span<double> out) {
    std::vector<double> g(out.size()), u(out.size());
    gate(r, i0, g);
    up(r, i0, u);
    for (size_t j = 0; j < out.size(); ++j) out[j] = ((i0 + j) % static_cast<uint64_t>(2 * I)) < static_cast<uint64_t>(I) ? g[j] : u[j];
  };
}

void generate(const Case& c, TensorMap& in, const Dist& gate, const Dist& up) {
  const SwigluParams p = swiglu_params(c);
  make(in, c, "x", c.dtype(), {p.N, 2 * p.I}, halves(p.I, gate, up));
}

struct RegisterSwigluRegimes {
  RegisterSwigluRegimes() {
    register_regime({"expert", "swiglu", "an expert's gate and up projections ~ N(0, 1.5^2)", {},
                     [](const Case& c, TensorMap& in) { generate(c, in, normal(1.5), normal(1.5)); }});
    register_regime({"clamp_edge", "swiglu",
                     "GLM-5.3-Flash's clamp (limit 10): gate and up ~ N(0, 12^2), so about 4 in 10 of each lie past "
                     "+-L and which side is clamped, and whether before or after the SiLU, decides the output",
                     {{"limit", "10"}},
                     [](const Case& c, TensorMap& in) {
                       const double s = 1.2 * (c.real("limit") > 0 ? c.real("limit") : 10.0);
                       generate(c, in, normal(s), normal(s));
                     }});
    register_regime({"saturated", "swiglu",
                     "gate ~ N(0, 40^2): exp(-gate) overflows f32 past -88 and exp(gate) past 88, so only an "
                     "overflow-safe sigmoid stays finite; up ~ N(0,1)",
                     {}, [](const Case& c, TensorMap& in) { generate(c, in, normal(40.0), normal(1.0)); }});
    register_regime({"tiny", "swiglu", "gate ~ N(0, 1e-3^2): silu(g) = g/2 + g^2/4 + ..., so its relative error shows; up ~ N(0,1)",
                     {}, [](const Case& c, TensorMap& in) { generate(c, in, normal(1e-3), normal(1.0)); }});
  }
};
const RegisterSwigluRegimes register_swiglu_regimes;

// Gate cases hold at least 2^19 outputs: a call well over 100 us, where the timing rules are sound.
DG_REGISTER_SUITE(swiglu_smoke,
                  Suite{"swiglu-smoke", "small swiglu cases: every regime and dtype, with and without the clamp (seconds)",
                        {
                            "swiglu(N=16,I=2048,regime=expert,dtype=bf16,seed=0)",
                            "swiglu(N=16,I=1536,regime=clamp_edge,dtype=bf16,seed=0)",
                            "swiglu(N=8,I=1000,regime=saturated,dtype=f32,seed=0)",
                            "swiglu(N=8,I=100,regime=tiny,dtype=f16,seed=0)",
                            "swiglu(N=4,I=64,regime=clamp_edge,dtype=f64,seed=0)",
                        }});
DG_REGISTER_SUITE(swiglu_gate,
                  Suite{"swiglu-gate", "the swiglu merge gate: experts' and dense widths, the clamp's edges, overflow, tiny "
                        "gates, odd I, every dtype",
                        {
                            "swiglu(N=512,I=2048,regime=expert,dtype=bf16,seed=0)",
                            "swiglu(N=512,I=1536,regime=expert,dtype=f16,seed=0)",
                            "swiglu(N=64,I=12288,regime=expert,dtype=bf16,seed=0)",
                            "swiglu(N=512,I=2048,regime=clamp_edge,dtype=bf16,seed=0)",
                            "swiglu(N=512,I=1030,regime=clamp_edge,dtype=f32,seed=0)",
                            "swiglu(N=512,I=1024,regime=saturated,dtype=bf16,seed=0)",
                            "swiglu(N=512,I=1408,regime=tiny,dtype=f32,seed=0)",
                            "swiglu(N=256,I=2048,regime=clamp_edge,dtype=f64,seed=0)",
                        }});

}  // namespace
}  // namespace dg
