// Mutants and equivalent variants of causal_conv1d (reference/causal_conv1d.h), each the honest CPU
// candidate's loop (candidates/cpu/causal_conv1d.cpp) with one hook turned (notes/model-ops.md,
// notes/kda-numerics.md §5: ShortConvolution of width 4).
//
//   causal_conv1d  y_t[d] = silu(sum_w weight[d][w] h[t + w]), history oldest first, state = last W-1 inputs
//     mutants      history taps in reverse (weight w meets h[W-1-w]); state written newest first;
//                  the pre-activation rounded to bf16 before SiLU (double rounding); the state left
//                  at its initial value (never updated)
//     equivalents  taps accumulated in f64; SiLU as z * sigmoid(z)
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/core/dtype.h"
#include "harness/ops/causal_conv1d.h"
#include "harness/cases/registry.h"

namespace dg::mutants {
namespace {

float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

struct ConvVariant {
  bool reverse_taps = false, state_newest_first = false, round_z_bf16 = false, state_frozen = false;   // mutants
  bool f64_taps = false, silu_via_sigmoid = false;                                                     // equivalents
};

RunFn conv_variant(ConvVariant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) {
    const ConvParams p = conv_params(c);
    const int64_t B = p.B, T = p.T, D = p.D, W = p.W, S = W - 1;
    std::vector<float> w(static_cast<size_t>(D * W)), hist(static_cast<size_t>(B * D * S), 0.0f);
    load_row(need(in, "weight", c.op()), 0, D * W, w.data());
    if (c.boolean("state")) load_row(need(in, "state0", c.op()), 0, B * D * S, hist.data());
    const std::vector<float> initial = hist;
    Tensor& y = need_out(out, "y", B * T * D, c.op());
    Tensor& st = need_out(out, "state", B * D * S, c.op());
    std::vector<float> xr(static_cast<size_t>(D)), yr(static_cast<size_t>(D)), h(static_cast<size_t>(W));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        load_row(need(in, "x", c.op()), (b * T + t) * D, D, xr.data());
        for (int64_t d = 0; d < D; ++d) {
          float* hs = hist.data() + (b * D + d) * S;
          std::copy_n(hs, S, h.data());
          h[static_cast<size_t>(S)] = xr[static_cast<size_t>(d)];
          const float* wd = w.data() + d * W;
          float z = 0.0f;
          if (v.f64_taps) {
            double zd = 0;
            for (int64_t k = 0; k < W; ++k) zd = std::fma(static_cast<double>(wd[k]), static_cast<double>(h[static_cast<size_t>(k)]), zd);
            z = static_cast<float>(zd);
          } else {
            for (int64_t k = 0; k < W; ++k) z = std::fma(wd[k], h[static_cast<size_t>(v.reverse_taps ? W - 1 - k : k)], z);
          }
          if (v.round_z_bf16) z = round_bf16(z);
          yr[static_cast<size_t>(d)] = !p.silu ? z : v.silu_via_sigmoid ? z * sigmoid(z) : z / (1.0f + std::exp(-z));
          std::copy_n(h.data() + 1, S, hs);
        }
        store_row(y, (b * T + t) * D, D, yr.data());
      }
    if (v.state_frozen) hist = initial;
    if (v.state_newest_first)
      for (int64_t i = 0; i < B * D; ++i) std::reverse(hist.begin() + i * S, hist.begin() + (i + 1) * S);
    store_row(st, 0, B * D * S, hist.data());
  };
}

CandidateInfo info(const char* name, const char* op, const char* algorithm, const char* doc) {
  return {name, op, "cpu", algorithm, DType::f32, DType::f32, DType::f32, doc};
}

}  // namespace

DG_REGISTER_CANDIDATE(causal_conv1d_mutant_reverse_taps,
                      info("causal_conv1d_mutant_reverse_taps", "causal_conv1d", "mutant", "history read newest first: weight w meets h[W-1-w] (conv state order)"),
                      conv_variant({.reverse_taps = true}));
DG_REGISTER_CANDIDATE(causal_conv1d_mutant_state_newest_first,
                      info("causal_conv1d_mutant_state_newest_first", "causal_conv1d", "mutant", "final conv state written newest first (conv state order)"),
                      conv_variant({.state_newest_first = true}));
DG_REGISTER_CANDIDATE(causal_conv1d_mutant_double_round,
                      info("causal_conv1d_mutant_double_round", "causal_conv1d", "mutant", "pre-activation rounded to bf16 before SiLU (double rounding)"),
                      conv_variant({.round_z_bf16 = true}));
DG_REGISTER_CANDIDATE(causal_conv1d_mutant_state_frozen,
                      info("causal_conv1d_mutant_state_frozen", "causal_conv1d", "mutant", "conv state returned as it came in (never updated)"),
                      conv_variant({.state_frozen = true}));
DG_REGISTER_CANDIDATE(causal_conv1d_equiv_f64_taps,
                      info("causal_conv1d_equiv_f64_taps", "causal_conv1d", "equivalent", "taps accumulated in f64"),
                      conv_variant({.f64_taps = true}));
DG_REGISTER_CANDIDATE(causal_conv1d_equiv_silu_sigmoid,
                      info("causal_conv1d_equiv_silu_sigmoid", "causal_conv1d", "equivalent", "SiLU as z * sigmoid(z)"),
                      conv_variant({.silu_via_sigmoid = true}));

}  // namespace dg::mutants
