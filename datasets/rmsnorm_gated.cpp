// Input regimes of rmsnorm_gated (the output norm of the KDA layer; notes/model-ops.md section 1.5).
// Stored dtypes: x and gate in the case's dtype; the weight in f32 (as the production layer keeps
// it). Its suite is layer-smoke, with the other ops of the layer (datasets/suites.cpp).
//
// Weight: ~ 1 + N(0, 0.1) (initialised to ones, trained away from them).
#include "datasets/dists.h"
#include "harness/ops/rmsnorm_gated.h"
#include "harness/cases/registry.h"

namespace dg {
namespace {

using namespace dists;

void norm_generate(const Case& c, TensorMap& in, double x_sd, double gate_sd) {
  NormParams p = norm_params(c);
  make(in, c, "x", c.dtype(), {p.N, p.D}, normal(x_sd));
  make(in, c, "gate", c.dtype(), {p.N, p.D}, normal(gate_sd));
  make(in, c, "weight", DType::f32, {p.D}, map(normal(0.1), [](double z) { return 1.0 + z; }));
}

}  // namespace

DG_REGISTER_REGIME(kimi_linear,
                   Regime{"kimi_linear", "rmsnorm_gated",
                          "KDA outputs x ~ N(0, 0.05^2), output gate ~ N(0,1), weight ~ 1 + N(0, 0.1)", {},
                          [](const Case& c, TensorMap& in) { norm_generate(c, in, 0.05, 1.0); }});

DG_REGISTER_REGIME(tiny_rms,
                   Regime{"tiny_rms", "rmsnorm_gated",
                          "x ~ N(0, 1e-3^2): mean(x^2) = 1e-6 is below eps = 1e-5, which then sets the scale", {},
                          [](const Case& c, TensorMap& in) { norm_generate(c, in, 1e-3, 1.0); }});

DG_REGISTER_REGIME(saturated_gate,
                   Regime{"saturated_gate", "rmsnorm_gated",
                          "output gate ~ N(0, 30^2): sigmoid saturates at 0 and 1 (exp overflow in a naive form)", {},
                          [](const Case& c, TensorMap& in) { norm_generate(c, in, 0.05, 30.0); }});

}  // namespace dg
