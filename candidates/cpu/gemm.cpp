// CPU candidates of gemm (reference/gemm.h):
//   gemm_cpu_naive_f32     the policy's naive: a triple loop, acc = acc + x*w in f32 in increasing k
//                          (a rounded product, then a rounded sum; no FMA), then + bias
//   gemm_cpu_blocked_f32   a register-blocked micro-kernel: 4 rows x 32 output columns of f32
//                          accumulators (8 AVX-512 vectors) over the block's weights packed [K,32];
//                          each output is one FMA chain acc = fma(x, w, acc) in increasing k from 0,
//                          then + bias, so its order is the naive's with the product unrounded;
//                          decode rows (M < 4) skip the packing: 16 k-lanes of FMA chains per output
//                          over the contiguous rows, reduced in a fixed tree (dot_lanes)
//   gemm_cpu_blocked_bf16  the same kernel as a tensor-core GEMM runs it: x, w and the bias read as
//                          bf16, f32 accumulation, the output rounded once to bf16
// Both kernels split the output columns over threads with parallel_for; an output's sum never
// depends on the split. Inputs are read as f32 (exact for bf16/f16/f32 storage, one rounding for f64).
#include <algorithm>
#include <cmath>
#include <vector>

#include "candidates/cpu/gemm.h"
#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/core/threads.h"
#include "harness/ops/gemm.h"

namespace dg {
namespace {

struct Operands {
  GemmParams p;
  std::vector<float> x, bias;   // [M,K]; [N] or empty
};

Operands load(const Case& c, const TensorMap& in, bool bf16) {
  Operands o{gemm_params(c), {}, {}};
  o.x.resize(static_cast<size_t>(o.p.M * o.p.K));
  load_row(need(in, "x", "gemm"), 0, o.p.M * o.p.K, o.x.data());
  if (o.p.bias) {
    o.bias.resize(static_cast<size_t>(o.p.N));
    load_row(need(in, "bias", "gemm"), 0, o.p.N, o.bias.data());
  }
  if (bf16) {
    for (float& v : o.x) v = round_bf16(v);
    for (float& v : o.bias) v = round_bf16(v);
  }
  return o;
}

void naive(const Case& c, const TensorMap& in, TensorMap& out) {
  const Operands o = load(c, in, false);
  const int64_t M = o.p.M, N = o.p.N, K = o.p.K;
  const Tensor& w = need(in, "w", "gemm");
  Tensor& y = need_out(out, "y", M * N, "gemm");
  std::vector<float> ys(static_cast<size_t>(M * N));
  parallel_for(N, [&](int64_t n0, int64_t n1) {
    std::vector<float> wr(static_cast<size_t>(K));
    for (int64_t n = n0; n < n1; ++n) {
      load_row(w, n * K, K, wr.data());
      for (int64_t m = 0; m < M; ++m) {
        const float* xm = o.x.data() + m * K;
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k) acc = acc + xm[k] * wr[static_cast<size_t>(k)];
        if (o.p.bias) acc = acc + o.bias[static_cast<size_t>(n)];
        ys[static_cast<size_t>(m * N + n)] = acc;
      }
    }
  });
  store_row(y, 0, M * N, ys.data());
}

using gemm_cpu::kCols;
using gemm_cpu::kRows;
using gemm_cpu::micro;

constexpr int64_t kLanes = 16;  // k-lanes of the decode path: one AVX-512 vector of f32

// Decode (M < kRows): no packing pass, each output a dot product of two contiguous rows in 16
// k-lanes (lane l: the FMA chain over k = l mod 16, increasing k), reduced in a fixed tree
// (l + 8, then + 4, + 2, + 1).
float dot_lanes(const float* x, const float* w, int64_t K) {
  float lane[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] = std::fma(x[k + l], w[k + l], lane[l]);
  for (int64_t l = 0; k < K; ++k, ++l) lane[l] = std::fma(x[k], w[k], lane[l]);
  for (int64_t h = kLanes / 2; h >= 1; h /= 2)
    for (int64_t l = 0; l < h; ++l) lane[l] = lane[l] + lane[l + h];
  return lane[0];
}

void decode(const Operands& o, const Tensor& w, bool bf16, std::vector<float>& ys) {
  const int64_t M = o.p.M, N = o.p.N, K = o.p.K;
  parallel_for(N, [&](int64_t n0, int64_t n1) {
    std::vector<float> wr(static_cast<size_t>(K));
    for (int64_t n = n0; n < n1; ++n) {
      load_row(w, n * K, K, wr.data());
      if (bf16)
        for (float& v : wr) v = round_bf16(v);
      for (int64_t m = 0; m < M; ++m) {
        const float acc = dot_lanes(o.x.data() + m * K, wr.data(), K);
        ys[static_cast<size_t>(m * N + n)] = o.p.bias ? acc + o.bias[static_cast<size_t>(n)] : acc;
      }
    }
  });
}

RunFn blocked(bool bf16) {
  return [bf16](const Case& c, const TensorMap& in, TensorMap& out) {
    const Operands o = load(c, in, bf16);
    const int64_t M = o.p.M, N = o.p.N, K = o.p.K;
    const Tensor& w = need(in, "w", "gemm");
    Tensor& y = need_out(out, "y", M * N, "gemm");
    std::vector<float> ys(static_cast<size_t>(M * N));
    if (M < kRows) {
      decode(o, w, bf16, ys);
      store_row(y, 0, M * N, ys.data());
      return;
    }
    parallel_for((N + kCols - 1) / kCols, [&](int64_t b0, int64_t b1) {
      std::vector<float> rows(static_cast<size_t>(kCols * K)), wt(static_cast<size_t>(K * kCols));
      float acc[kRows][kCols];
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t n0 = b * kCols, nb = std::min(kCols, N - n0);
        load_row(w, n0 * K, nb * K, rows.data());
        std::fill(wt.begin(), wt.end(), 0.0f);
        for (int64_t l = 0; l < nb; ++l)
          for (int64_t k = 0; k < K; ++k) {
            const float v = rows[static_cast<size_t>(l * K + k)];
            wt[static_cast<size_t>(k * kCols + l)] = bf16 ? round_bf16(v) : v;
          }
        for (int64_t m0 = 0; m0 < M; m0 += kRows) {
          const int64_t R = std::min(kRows, M - m0);
          const float* xm = o.x.data() + m0 * K;
          switch (R) {
            case 4: micro<4>(xm, K, K, wt.data(), acc); break;
            case 3: micro<3>(xm, K, K, wt.data(), acc); break;
            case 2: micro<2>(xm, K, K, wt.data(), acc); break;
            default: micro<1>(xm, K, K, wt.data(), acc); break;
          }
          for (int64_t r = 0; r < R; ++r)
            for (int64_t l = 0; l < nb; ++l)
              ys[static_cast<size_t>((m0 + r) * N + n0 + l)] =
                  o.p.bias ? acc[r][l] + o.bias[static_cast<size_t>(n0 + l)] : acc[r][l];
        }
      }
    });
    store_row(y, 0, M * N, ys.data());   // one rounding into y's dtype (bf16 for the bf16 kernel)
  };
}

}  // namespace

DG_REGISTER_CANDIDATE(gemm_cpu_naive_f32,
                      {"gemm_cpu_naive_f32", "gemm", "cpu", "naive", DType::f32, DType::f32, DType::f32,
                       "a triple loop: acc = acc + x*w in f32, increasing k, no FMA (the policy's naive)"},
                      naive);
DG_REGISTER_CANDIDATE(gemm_cpu_blocked_f32,
                      {"gemm_cpu_blocked_f32", "gemm", "cpu", "blocked", DType::f32, DType::f32, DType::f32,
                       "4x32 register-blocked FMA micro-kernel over packed weights, one f32 FMA chain per output"},
                      blocked(false));
DG_REGISTER_CANDIDATE(gemm_cpu_blocked_bf16,
                      {"gemm_cpu_blocked_bf16", "gemm", "cpu", "blocked", DType::bf16, DType::f32, DType::bf16,
                       "a tensor-core GEMM's numerics: bf16 in, f32 FMA accumulation, the output rounded to bf16"},
                      blocked(true));

}  // namespace dg
