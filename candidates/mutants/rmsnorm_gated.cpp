// Mutants and equivalent variants of rmsnorm_gated (reference/rmsnorm_gated.h), each the honest CPU
// candidate's loop (candidates/cpu/rmsnorm_gated.cpp) with one hook turned (notes/model-ops.md,
// notes/kda-numerics.md §5: FusedRMSNormGated with a sigmoid gate).
//
//   rmsnorm_gated  y = x * (1 / sqrt(sum x^2 / D + eps)) * w * sigmoid(g)
//     mutants      eps outside the root; SiLU gate for the sigmoid; x * rstd rounded to bf16 before
//                  the weight and gate (double rounding); sum of squares accumulated in bf16
//     equivalents  f64 sum of squares; x / sqrt(...) (a division for the reciprocal's product)
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/core/dtype.h"
#include "harness/ops/rmsnorm_gated.h"
#include "harness/cases/registry.h"

namespace dg::mutants {
namespace {

float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

struct NormVariant {
  bool eps_outside_sqrt = false, silu_gate = false, round_normed_bf16 = false, sum_bf16 = false;   // mutants
  bool f64_sum = false, divide = false;                                                             // equivalents
};

RunFn norm_variant(NormVariant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) {
    const NormParams p = norm_params(c);
    const int64_t N = p.N, D = p.D;
    std::vector<float> x(static_cast<size_t>(N * D)), g(x.size()), w(static_cast<size_t>(D)), y(x.size());
    load_row(need(in, "x", c.op()), 0, N * D, x.data());
    load_row(need(in, "gate", c.op()), 0, N * D, g.data());
    load_row(need(in, "weight", c.op()), 0, D, w.data());
    const float eps = static_cast<float>(p.eps);
    for (int64_t n = 0; n < N; ++n) {
      const float* xr = x.data() + n * D;
      float ss = 0.0f;
      if (v.f64_sum) {
        double s = 0;
        for (int64_t i = 0; i < D; ++i) s = std::fma(static_cast<double>(xr[i]), static_cast<double>(xr[i]), s);
        ss = static_cast<float>(s);
      } else {
        for (int64_t i = 0; i < D; ++i) ss = v.sum_bf16 ? round_bf16(std::fma(xr[i], xr[i], ss)) : std::fma(xr[i], xr[i], ss);
      }
      const float ms = ss / static_cast<float>(D);
      const float root = v.eps_outside_sqrt ? std::sqrt(ms) + eps : std::sqrt(ms + eps);
      const float rstd = 1.0f / root;
      for (int64_t i = 0; i < D; ++i) {
        const float gi = g[static_cast<size_t>(n * D + i)];
        float normed = v.divide ? xr[i] / root : xr[i] * rstd;
        if (v.round_normed_bf16) normed = round_bf16(normed);
        const float gate = v.silu_gate ? gi * sigmoid(gi) : sigmoid(gi);
        y[static_cast<size_t>(n * D + i)] = (normed * w[static_cast<size_t>(i)]) * gate;
      }
    }
    store_row(need_out(out, "y", N * D, c.op()), 0, N * D, y.data());
  };
}

CandidateInfo info(const char* name, const char* op, const char* algorithm, const char* doc) {
  return {name, op, "cpu", algorithm, DType::f32, DType::f32, DType::f32, doc};
}

}  // namespace

DG_REGISTER_CANDIDATE(rmsnorm_gated_mutant_eps_outside_sqrt,
                      info("rmsnorm_gated_mutant_eps_outside_sqrt", "rmsnorm_gated", "mutant", "1 / (sqrt(mean x^2) + eps): epsilon outside the root"),
                      norm_variant({.eps_outside_sqrt = true}));
DG_REGISTER_CANDIDATE(rmsnorm_gated_mutant_silu_gate,
                      info("rmsnorm_gated_mutant_silu_gate", "rmsnorm_gated", "mutant", "SiLU gate where the layer has sigmoid (FusedRMSNormGated activation)"),
                      norm_variant({.silu_gate = true}));
DG_REGISTER_CANDIDATE(rmsnorm_gated_mutant_double_round,
                      info("rmsnorm_gated_mutant_double_round", "rmsnorm_gated", "mutant", "x * rstd rounded to bf16 before weight and gate (double rounding)"),
                      norm_variant({.round_normed_bf16 = true}));
DG_REGISTER_CANDIDATE(rmsnorm_gated_mutant_sum_bf16,
                      info("rmsnorm_gated_mutant_sum_bf16", "rmsnorm_gated", "mutant", "sum of squares accumulated in bf16"),
                      norm_variant({.sum_bf16 = true}));
DG_REGISTER_CANDIDATE(rmsnorm_gated_equiv_f64_sum,
                      info("rmsnorm_gated_equiv_f64_sum", "rmsnorm_gated", "equivalent", "sum of squares in f64"),
                      norm_variant({.f64_sum = true}));
DG_REGISTER_CANDIDATE(rmsnorm_gated_equiv_divide,
                      info("rmsnorm_gated_equiv_divide", "rmsnorm_gated", "equivalent", "x / sqrt(mean x^2 + eps) instead of x * reciprocal"),
                      norm_variant({.divide = true}));

}  // namespace dg::mutants
