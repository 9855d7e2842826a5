// CPU candidates of moe_combine (reference/moe_combine.h). Per token, the slot factors a_j in f32:
// rsf * w_j when rsf scales the weights (the reference's own rounding point), w_j when it scales the
// routed sum; then per channel:
//   moe_combine_cpu_naive_f32   the policy's naive: acc = acc + a_j * E_j in f32 in slot order, then
//                               acc * rsf (rsf_on = output), then + S; y in f32
//   moe_combine_cpu_fused_bf16  production's fused combine (vLLM's moe_sum, the fused MoE kernels'
//                               epilogue): bf16 in, acc = fma(a_j, E_j, acc) in f32, rsf and the
//                               shared add in f32, y rounded once to bf16. (vLLM's unfused path,
//                               which rounds the routed sum to bf16 before rsf and the shared add,
//                               is a mutant: candidates/mutants/moe_combine.cpp.)
// Inputs are read as f32 (exact for bf16/f16/f32 storage, one rounding for f64).
#include <cmath>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/moe_combine.h"

namespace dg {
namespace {

RunFn make(bool fused) {
  return [fused](const Case& c, const TensorMap& in, TensorMap& out) {
    const MoeCombineParams p = moe_combine_params(c);
    const int64_t T = p.T, k = p.k, H = p.H;
    const float rsf = static_cast<float>(p.rsf);
    const Tensor& e = need(in, "expert_out", "moe_combine");
    Tensor& y = need_out(out, "y", T * H, "moe_combine");
    std::vector<float> er(static_cast<size_t>(k * H)), w(static_cast<size_t>(k)), s(static_cast<size_t>(H)),
        yr(static_cast<size_t>(H));
    for (int64_t t = 0; t < T; ++t) {
      load_row(e, t * k * H, k * H, er.data());
      load_row(need(in, "weights", "moe_combine"), t * k, k, w.data());
      if (p.shared) load_row(need(in, "shared", "moe_combine"), t * H, H, s.data());
      if (fused) {
        for (float& v : er) v = round_bf16(v);
        for (float& v : s) v = round_bf16(v);
      }
      for (float& a : w) a = p.rsf_on_output ? a : rsf * a;
      for (int64_t h = 0; h < H; ++h) {
        float acc = 0.0f;
        for (int64_t j = 0; j < k; ++j) {
          const float x = er[static_cast<size_t>(j * H + h)];
          acc = fused ? std::fma(w[static_cast<size_t>(j)], x, acc) : acc + w[static_cast<size_t>(j)] * x;
        }
        if (p.rsf_on_output) acc = acc * rsf;
        yr[static_cast<size_t>(h)] = p.shared ? acc + s[static_cast<size_t>(h)] : acc;
      }
      store_row(y, t * H, H, yr.data());   // one rounding into y's dtype (bf16 for the fused kernel)
    }
  };
}

}  // namespace

DG_REGISTER_CANDIDATE(moe_combine_cpu_naive_f32,
                      {"moe_combine_cpu_naive_f32", "moe_combine", "cpu", "naive", DType::f32, DType::f32, DType::f32,
                       "plain f32 loops: acc = acc + a_j*E_j in slot order, rsf, + shared (the policy's naive)"},
                      make(false));
DG_REGISTER_CANDIDATE(moe_combine_cpu_fused_bf16,
                      {"moe_combine_cpu_fused_bf16", "moe_combine", "cpu", "fused", DType::bf16, DType::f32, DType::bf16,
                       "production's fused combine: bf16 in, f32 FMA accumulation, rsf and shared in f32, one bf16 rounding"},
                      make(true));

}  // namespace dg
