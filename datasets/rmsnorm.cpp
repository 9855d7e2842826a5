// Input regimes and suites of rmsnorm and add_rmsnorm (reference/rmsnorm.h; notes/model-ops.md
// sections 1.2, 2 and 5). Everything is stored in the case's dtype, the weight too (checkpoints keep
// norm weights in the model dtype).
//
// Hidden states carry a few "massive activation" channels (dists::massive_channels): the same two
// channels of every token hold values hundreds of times the others', so one term dominates a row's
// sum of squares and the rest of the row is normalized to small values. The norm
// weight ~ 1 + N(0, 0.2) (initialised to ones, trained away from them).
#include <cmath>
#include <cstdint>

#include "datasets/dists.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/ops/rmsnorm.h"

namespace dg {
namespace {

using namespace dists;

Dist weight() { return map(normal(0.2), [](double z) { return 1.0 + z; }); }

// x, weight, and for add_rmsnorm the residual.
void generate(const Case& c, TensorMap& in, const Dist& x, const Dist& residual) {
  const RmsNormParams p = rmsnorm_params(c);
  make(in, c, "x", c.dtype(), {p.N, p.D}, x);
  make(in, c, "weight", c.dtype(), {p.D}, weight());
  if (c.op() == "add_rmsnorm") make(in, c, "residual", c.dtype(), {p.N, p.D}, residual);
}

// add_rmsnorm "cancel": the residual is -x plus a little, so s = x + residual keeps only the
// low-order part and its rounding to the dtype is a large relative change.
void generate_cancel(const Case& c, TensorMap& in) {
  const RmsNormParams p = rmsnorm_params(c);
  make(in, c, "x", c.dtype(), {p.N, p.D}, normal(1.0));
  make(in, c, "weight", c.dtype(), {p.D}, weight());
  Tensor small(DType::f64, {p.N, p.D});
  fill(small, c, "residual", normal(1e-2));
  Tensor res(c.dtype(), {p.N, p.D});
  for (int64_t i = 0; i < p.N * p.D; ++i) res.set(i, -in.at("x").get(i) + small.get(i));
  in["residual"] = std::move(res);
}

struct RegisterRmsNormRegimes {
  RegisterRmsNormRegimes() {
    for (const char* op : {"rmsnorm", "add_rmsnorm"}) {
      register_regime({"hidden", op,
                       "hidden states x ~ N(0,1) with two massive-activation channels (D/7, D/3) of +-(100..400); "
                       "add_rmsnorm: x the sublayer output ~ N(0,1), the residual the hidden state",
                       {},
                       [](const Case& c, TensorMap& in) {
                         const bool add = c.op() == "add_rmsnorm";
                         generate(c, in, add ? normal(1.0) : massive_channels(c.integer("D"), 1.0), massive_channels(c.integer("D"), 1.0));
                       }});
      register_regime({"tiny_rms", op,
                       "x (and the residual) ~ N(0, 2e-3^2): mean(x^2) ~ 4e-6 is below eps, whose value and place "
                       "(inside the root) set the scale",
                       {}, [](const Case& c, TensorMap& in) { generate(c, in, normal(2e-3), normal(2e-3)); }});
      register_regime({"offset", op,
                       "x = 8 + N(0, 0.5^2): every term of the sum of squares is large and alike, so a sequential f32 "
                       "sum loses bits with D and a mean subtracted (LayerNorm's) changes everything",
                       {},
                       [](const Case& c, TensorMap& in) {
                         const Dist d = map(normal(0.5), [](double z) { return 8.0 + z; });
                         generate(c, in, d, d);
                       }});
    }
    register_regime({"qk_norm", "rmsnorm",
                     "QK-norm: rows of one head (D = 128), q or k projections ~ N(0, 3^2) before RoPE", {{"D", "128"}},
                     [](const Case& c, TensorMap& in) { generate(c, in, normal(3.0), normal(3.0)); }});
    register_regime({"cancel", "add_rmsnorm",
                     "residual = -x + N(0, 1e-2^2): the sum cancels to 1% of its terms, so where the residual is "
                     "rounded (to the dtype, before squaring) decides the result",
                     {}, generate_cancel});
    register_regime({"large_residual", "add_rmsnorm",
                     "residual ~ N(0, 30^2) with massive channels, x ~ N(0,1): rounding s to the dtype drops much of x",
                     {},
                     [](const Case& c, TensorMap& in) { generate(c, in, normal(1.0), massive_channels(c.integer("D"), 30.0)); }});
  }
};
const RegisterRmsNormRegimes register_rmsnorm_regimes;

// Suites. Shapes from the configs (notes/model-ops.md section 2): hidden 2048 (GLM-4.7-Flash), 2304
// (Kimi-Linear), 4096 (GLM-4.5-Air, GLM-5.3-Flash), 5120 (GLM-4.5/4.6/4.7), 6144 (GLM-5.x), 7168;
// QK-norm over head_dim 128 with tokens x heads rows; MLA's latent norms of 512 and 1536. Every gate
// case is at least 2^19 elements: a call well over 100 us, where the timing rules are sound on 2 cores.
DG_REGISTER_SUITE(rmsnorm_smoke,
                  Suite{"rmsnorm-smoke", "small rmsnorm cases: every regime, dtype and eps (seconds)",
                        {
                            "rmsnorm(N=16,D=4096,regime=hidden,dtype=bf16,seed=0)",
                            "rmsnorm(N=64,D=128,regime=qk_norm,dtype=bf16,seed=0)",
                            "rmsnorm(N=16,D=1000,eps=1e-06,regime=tiny_rms,dtype=f32,seed=0)",
                            "rmsnorm(N=8,D=2048,regime=offset,dtype=f16,seed=0)",
                            "rmsnorm(N=4,D=100,regime=hidden,dtype=f64,seed=0)",
                        }});
DG_REGISTER_SUITE(rmsnorm_gate,
                  Suite{"rmsnorm-gate", "the rmsnorm merge gate: production hidden sizes, QK-norm, MLA latents, tiny rms, "
                        "offset rows, odd D, every dtype and eps",
                        {
                            "rmsnorm(N=256,D=4096,regime=hidden,dtype=bf16,seed=0)",
                            "rmsnorm(N=128,D=6144,regime=hidden,dtype=bf16,seed=0)",
                            "rmsnorm(N=128,D=7168,regime=offset,dtype=bf16,seed=0)",
                            "rmsnorm(N=8192,D=128,regime=qk_norm,dtype=bf16,seed=0)",
                            "rmsnorm(N=2048,D=512,eps=1e-06,regime=hidden,dtype=bf16,seed=0)",
                            "rmsnorm(N=256,D=2304,eps=1e-06,regime=tiny_rms,dtype=f32,seed=0)",
                            "rmsnorm(N=128,D=5120,regime=tiny_rms,dtype=f16,seed=0)",
                            "rmsnorm(N=512,D=2050,regime=offset,dtype=f32,seed=0)",
                            "rmsnorm(N=512,D=1536,regime=hidden,dtype=f64,seed=0)",
                        }});
DG_REGISTER_SUITE(add_rmsnorm_smoke,
                  Suite{"add-rmsnorm-smoke", "small add_rmsnorm cases: every regime, dtype and eps (seconds)",
                        {
                            "add_rmsnorm(N=16,D=4096,regime=hidden,dtype=bf16,seed=0)",
                            "add_rmsnorm(N=16,D=2050,regime=cancel,dtype=bf16,seed=0)",
                            "add_rmsnorm(N=16,D=256,eps=1e-06,regime=tiny_rms,dtype=f32,seed=0)",
                            "add_rmsnorm(N=8,D=2048,regime=large_residual,dtype=f16,seed=0)",
                            "add_rmsnorm(N=4,D=100,regime=offset,dtype=f64,seed=0)",
                        }});
DG_REGISTER_SUITE(add_rmsnorm_gate,
                  Suite{"add-rmsnorm-gate", "the add_rmsnorm merge gate: production hidden sizes, cancellation, large "
                        "residuals, tiny rms, odd D, every dtype and eps",
                        {
                            "add_rmsnorm(N=256,D=4096,regime=hidden,dtype=bf16,seed=0)",
                            "add_rmsnorm(N=4096,D=256,regime=hidden,dtype=bf16,seed=0)",
                            "add_rmsnorm(N=128,D=6144,regime=large_residual,dtype=bf16,seed=0)",
                            "add_rmsnorm(N=128,D=5120,regime=cancel,dtype=bf16,seed=0)",
                            "add_rmsnorm(N=256,D=2304,eps=1e-06,regime=tiny_rms,dtype=f32,seed=0)",
                            "add_rmsnorm(N=128,D=7168,regime=offset,dtype=bf16,seed=0)",
                            "add_rmsnorm(N=512,D=2050,regime=cancel,dtype=f32,seed=0)",
                            "add_rmsnorm(N=128,D=4096,eps=1e-06,regime=large_residual,dtype=f16,seed=0)",
                            "add_rmsnorm(N=256,D=2048,regime=hidden,dtype=f64,seed=0)",
                        }});

}  // namespace
}  // namespace dg
