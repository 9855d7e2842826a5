// CPU candidate of rmsnorm_gated (reference/rmsnorm_gated.h), f32 arithmetic:
//   rmsnorm_gated_cpu_f32     y = x * (1 / sqrt(sum x^2 / D + eps)) * w * sigmoid(g), f32 sum in order
#include "candidates/cpu/rmsnorm_gated.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/ops/rmsnorm_gated.h"
#include "harness/cases/registry.h"

namespace dg {
namespace rmsnorm_gated_cpu {
namespace {

inline float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

}  // namespace

void gated_norm_rows(const float* x, const float* g, const float* w, int64_t N, int64_t D, float eps, float* y) {
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * D;
    float ss = 0.0f;
    for (int64_t i = 0; i < D; ++i) ss = std::fma(xr[i], xr[i], ss);
    const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
    for (int64_t i = 0; i < D; ++i) y[n * D + i] = ((xr[i] * rstd) * w[i]) * sigmoid(g[n * D + i]);
  }
}

}  // namespace rmsnorm_gated_cpu

namespace {

using rmsnorm_gated_cpu::gated_norm_rows;

void norm_cpu(const Case& c, const TensorMap& in, TensorMap& out) {
  const NormParams p = norm_params(c);
  std::vector<float> x(static_cast<size_t>(p.N * p.D)), g(x.size()), w(static_cast<size_t>(p.D)), y(x.size());
  load_row(need(in, "x", "rmsnorm_gated"), 0, p.N * p.D, x.data());
  load_row(need(in, "gate", "rmsnorm_gated"), 0, p.N * p.D, g.data());
  load_row(need(in, "weight", "rmsnorm_gated"), 0, p.D, w.data());
  gated_norm_rows(x.data(), g.data(), w.data(), p.N, p.D, static_cast<float>(p.eps), y.data());
  store_row(need_out(out, "y", p.N * p.D, "rmsnorm_gated"), 0, p.N * p.D, y.data());
}

}  // namespace

DG_REGISTER_CANDIDATE(rmsnorm_gated_cpu_f32,
                      CandidateInfo{"rmsnorm_gated_cpu_f32", "rmsnorm_gated", "cpu", "direct", DType::f32, DType::f32,
                                    DType::f32, "f32 sum of squares in order, then scale, weight, sigmoid gate"},
                      norm_cpu);

}  // namespace dg
