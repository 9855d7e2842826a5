// CPU candidate of causal_conv1d (reference/causal_conv1d.h), f32 arithmetic:
//   causal_conv1d_cpu_direct_f32  y_t[d] = silu(sum_w weight[d][w] h[t + w]) by fma in w order; silu(z) =
//                                 z / (1 + exp(-z)) in f32
#include "candidates/cpu/causal_conv1d.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/ops/causal_conv1d.h"
#include "harness/cases/registry.h"

namespace dg {
namespace {

using causal_conv1d_cpu::conv_tap;
using causal_conv1d_cpu::silu;

void conv_cpu(const Case& c, const TensorMap& in, TensorMap& out) {
  const ConvParams p = conv_params(c);
  const int64_t B = p.B, T = p.T, D = p.D, W = p.W, S = W - 1;
  const Tensor& x = need(in, "x", "causal_conv1d");
  std::vector<float> w(static_cast<size_t>(D * W)), hist(static_cast<size_t>(B * D * S), 0.0f);
  load_row(need(in, "weight", "causal_conv1d"), 0, D * W, w.data());
  if (c.boolean("state")) load_row(need(in, "state0", "causal_conv1d"), 0, B * D * S, hist.data());
  Tensor& y = need_out(out, "y", B * T * D, "causal_conv1d");
  Tensor& st = need_out(out, "state", B * D * S, "causal_conv1d");
  std::vector<float> xr(static_cast<size_t>(D)), yr(static_cast<size_t>(D)), h(static_cast<size_t>(W));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      load_row(x, (b * T + t) * D, D, xr.data());
      for (int64_t d = 0; d < D; ++d) {
        float* hs = hist.data() + (b * D + d) * S;
        std::copy_n(hs, S, h.data());
        h[static_cast<size_t>(S)] = xr[static_cast<size_t>(d)];
        const float z = conv_tap(w.data() + d * W, h.data(), W);
        yr[static_cast<size_t>(d)] = p.silu ? silu(z) : z;
        std::copy_n(h.data() + 1, S, hs);   // the last W-1 inputs
      }
      store_row(y, (b * T + t) * D, D, yr.data());
    }
  store_row(st, 0, B * D * S, hist.data());
}

}  // namespace

DG_REGISTER_CANDIDATE(causal_conv1d_cpu_f32,
                      CandidateInfo{"causal_conv1d_cpu_direct_f32", "causal_conv1d", "cpu", "direct", DType::f32,
                                    DType::f32, DType::f32, "width-W taps by fma in order, SiLU in f32"},
                      conv_cpu);

}  // namespace dg
