// CPU candidates of swiglu (reference/swiglu.h):
//   swiglu_cpu_naive_f32   the policy's naive: plain f32 loops, g = min(gate, L), u = clamp(up, -L, L),
//                          y = g / (1 + exp(-g)) * u (exp(-g) overflows to Inf for g < -88: y = -0 * u,
//                          within an ulp of the true value's size there)
//   swiglu_cpu_fused_bf16  vLLM's fused silu_and_mul: bf16 in, the same f32 arithmetic, one rounding
//                          of the product to bf16
// Inputs are read as f32 (exact for bf16/f16/f32 storage, one rounding for f64).
#include <algorithm>
#include <cmath>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/swiglu.h"

namespace dg {
namespace {


RunFn make(bool bf16) {
  return [bf16](const Case& c, const TensorMap& in, TensorMap& out) {
    const SwigluParams p = swiglu_params(c);
    const int64_t N = p.N, I = p.I;
    const float L = static_cast<float>(p.limit);
    const Tensor& x = need(in, "x", "swiglu");
    Tensor& y = need_out(out, "y", N * I, "swiglu");
    std::vector<float> row(static_cast<size_t>(2 * I)), yr(static_cast<size_t>(I));
    for (int64_t n = 0; n < N; ++n) {
      load_row(x, n * 2 * I, 2 * I, row.data());
      if (bf16)
        for (float& v : row) v = round_bf16(v);
      for (int64_t i = 0; i < I; ++i) {
        float g = row[static_cast<size_t>(i)], u = row[static_cast<size_t>(I + i)];
        if (L > 0) {
          g = std::min(g, L);
          u = std::clamp(u, -L, L);
        }
        yr[static_cast<size_t>(i)] = g / (1.0f + std::exp(-g)) * u;
      }
      store_row(y, n * I, I, yr.data());
    }
  };
}

}  // namespace

DG_REGISTER_CANDIDATE(swiglu_cpu_naive_f32,
                      {"swiglu_cpu_naive_f32", "swiglu", "cpu", "naive", DType::f32, DType::f32, DType::f32,
                       "plain f32 loops: the clamps, g / (1 + exp(-g)) * u (the policy's naive)"},
                      make(false));
DG_REGISTER_CANDIDATE(swiglu_cpu_fused_bf16,
                      {"swiglu_cpu_fused_bf16", "swiglu", "cpu", "fused", DType::bf16, DType::f32, DType::bf16,
                       "vLLM's silu_and_mul: bf16 in, f32 arithmetic, the product rounded once to bf16"},
                      make(true));

}  // namespace dg
