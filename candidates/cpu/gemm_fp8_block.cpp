// CPU candidates of gemm_fp8_block (reference/gemm_fp8_block.h). Each reads the e4m3 operands as f32
// (exact) and the f32 scales, and keeps the op's scheme: a 128-block's partial, then promoted (scaled
// by x_scale * w_scale) into an f32 accumulator across blocks in increasing b.
//   gemm_fp8_block_cpu_naive_f32       the policy's naive: plain loops, p = p + x*w in f32 in increasing
//                                      k (the products of two e4m3 values are exact in f32), then
//                                      acc = acc + p * x_scale * w_scale (left to right), y in f32
//   gemm_fp8_block_cpu_blocked_f32     DeepGEMM's form on CPU: gemm's 4 x 32 register-blocked FMA
//                                      micro-kernel (candidates/cpu/gemm.h) over each 128-block of
//                                      packed weights, then the promotion acc = fma(x_scale * w_scale,
//                                      p, acc) as DeepGEMM's FFMA does; y in f32
//   gemm_fp8_block_cpu_deepgemm_bf16   the numerics of a Hopper FP8 kernel: the block's partial in an
//                                      accumulator of 14 significant bits (13 fraction bits, every add
//                                      exact then truncated toward zero: the ~14 bits the DeepSeek-V3
//                                      report measured on H800's FP8 MMA), promoted to f32 every 128 k
//                                      by the same FFMA, y rounded once to bf16. Its declared state
//                                      dtype, tf32 (11 bits), is a lower bound of that accumulator's
//                                      precision: the op's format bound holds it to at least that.
// Every kernel splits the output columns over threads with parallel_for; an output's sums never
// depend on the split.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "candidates/cpu/gemm.h"
#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/core/threads.h"
#include "harness/ops/gemm_fp8_block.h"

namespace dg {
namespace {

constexpr int64_t B = kFp8Block;

struct Operands {
  GemmFp8BlockParams p;
  std::vector<float> x, xs, ws;   // [M,K], [M,K/128], [ceil(N/128),K/128]
};

Operands load(const Case& c, const TensorMap& in) {
  Operands o{gemm_fp8_block_params(c), {}, {}, {}};
  const int64_t KB = o.p.kb();
  o.x.resize(static_cast<size_t>(o.p.M * o.p.K));
  o.xs.resize(static_cast<size_t>(o.p.M * KB));
  o.ws.resize(static_cast<size_t>(o.p.nb() * KB));
  load_row(need(in, "x", "gemm_fp8_block"), 0, o.p.M * o.p.K, o.x.data());
  load_row(need(in, "x_scale", "gemm_fp8_block"), 0, o.p.M * KB, o.xs.data());
  load_row(need(in, "w_scale", "gemm_fp8_block"), 0, o.p.nb() * KB, o.ws.data());
  return o;
}

// A double truncated toward zero to 14 significant bits (exact for the sums below: an accumulator of
// 14 bits plus an e4m3 product spans at most 43 bits, well inside a double).
float chop14(double t) {
  uint64_t b;
  std::memcpy(&b, &t, 8);
  b &= ~((uint64_t{1} << 39) - 1);
  std::memcpy(&t, &b, 8);
  return static_cast<float>(t);
}

// The per-output loops of the naive and the Hopper-numerics kernels: `tc` selects the 14-bit
// accumulator and the FFMA promotion.
RunFn per_output(bool tc) {
  return [tc](const Case& c, const TensorMap& in, TensorMap& out) {
    const Operands o = load(c, in);
    const int64_t M = o.p.M, N = o.p.N, K = o.p.K, KB = o.p.kb();
    const Tensor& w = need(in, "w", "gemm_fp8_block");
    Tensor& y = need_out(out, "y", M * N, "gemm_fp8_block");
    std::vector<float> ys(static_cast<size_t>(M * N));
    parallel_for(N, [&](int64_t n0, int64_t n1) {
      std::vector<float> wr(static_cast<size_t>(K));
      for (int64_t n = n0; n < n1; ++n) {
        load_row(w, n * K, K, wr.data());
        const float* wsn = o.ws.data() + (n / B) * KB;
        for (int64_t m = 0; m < M; ++m) {
          const float* xm = o.x.data() + m * K;
          float acc = 0.0f;
          for (int64_t b = 0; b < KB; ++b) {
            float p = 0.0f;
            for (int64_t k = b * B; k < (b + 1) * B; ++k)
              p = tc ? chop14(static_cast<double>(p) + static_cast<double>(xm[k] * wr[static_cast<size_t>(k)]))
                     : p + xm[k] * wr[static_cast<size_t>(k)];
            const float xsb = o.xs[static_cast<size_t>(m * KB + b)];
            acc = tc ? std::fma(xsb * wsn[b], p, acc) : acc + p * xsb * wsn[b];
          }
          ys[static_cast<size_t>(m * N + n)] = acc;
        }
      }
    });
    store_row(y, 0, M * N, ys.data());   // one rounding into y's dtype (bf16 for the Hopper numerics)
  };
}

using gemm_cpu::kCols;
using gemm_cpu::kRows;

// Rows [m0, m0 + R) of output columns [n0, n0 + kCols): wt holds the columns' weights packed [K][kCols].
template <int R>
void rows_block(const Operands& o, int64_t m0, int64_t n0, const float* wt, float (&fin)[kRows][kCols]) {
  const int64_t K = o.p.K, KB = o.p.kb();
  const float* wsn = o.ws.data() + (n0 / B) * KB;   // kCols divides 128: one weight-scale row
  float acc[kRows][kCols];
  for (int r = 0; r < R; ++r)
    for (int64_t l = 0; l < kCols; ++l) fin[r][l] = 0.0f;
  for (int64_t b = 0; b < KB; ++b) {
    gemm_cpu::micro<R>(o.x.data() + m0 * K + b * B, K, B, wt + b * B * kCols, acc);
    for (int r = 0; r < R; ++r) {
      const float s = o.xs[static_cast<size_t>((m0 + r) * KB + b)] * wsn[b];
      for (int64_t l = 0; l < kCols; ++l) fin[r][l] = std::fma(s, acc[r][l], fin[r][l]);
    }
  }
}

void blocked(const Case& c, const TensorMap& in, TensorMap& out) {
  const Operands o = load(c, in);
  const int64_t M = o.p.M, N = o.p.N, K = o.p.K;
  const Tensor& w = need(in, "w", "gemm_fp8_block");
  Tensor& y = need_out(out, "y", M * N, "gemm_fp8_block");
  std::vector<float> ys(static_cast<size_t>(M * N));
  parallel_for((N + kCols - 1) / kCols, [&](int64_t c0, int64_t c1) {
    std::vector<float> rows(static_cast<size_t>(kCols * K)), wt(static_cast<size_t>(K * kCols));
    float fin[kRows][kCols];
    for (int64_t cb = c0; cb < c1; ++cb) {
      const int64_t n0 = cb * kCols, nc = std::min(kCols, N - n0);
      load_row(w, n0 * K, nc * K, rows.data());
      std::fill(wt.begin(), wt.end(), 0.0f);
      for (int64_t l = 0; l < nc; ++l)
        for (int64_t k = 0; k < K; ++k) wt[static_cast<size_t>(k * kCols + l)] = rows[static_cast<size_t>(l * K + k)];
      for (int64_t m0 = 0; m0 < M; m0 += kRows) {
        const int64_t R = std::min(kRows, M - m0);
        switch (R) {
          case 4: rows_block<4>(o, m0, n0, wt.data(), fin); break;
          case 3: rows_block<3>(o, m0, n0, wt.data(), fin); break;
          case 2: rows_block<2>(o, m0, n0, wt.data(), fin); break;
          default: rows_block<1>(o, m0, n0, wt.data(), fin); break;
        }
        for (int64_t r = 0; r < R; ++r)
          for (int64_t l = 0; l < nc; ++l) ys[static_cast<size_t>((m0 + r) * N + n0 + l)] = fin[r][l];
      }
    }
  });
  store_row(y, 0, M * N, ys.data());
}

}  // namespace

DG_REGISTER_CANDIDATE(gemm_fp8_block_cpu_naive_f32,
                      {"gemm_fp8_block_cpu_naive_f32", "gemm_fp8_block", "cpu", "naive", DType::f32, DType::f32,
                       DType::f32,
                       "plain loops: each 128-block's partial p = p + x*w in f32, then acc = acc + p*x_scale*w_scale "
                       "(the policy's naive)"},
                      per_output(false));
DG_REGISTER_CANDIDATE(gemm_fp8_block_cpu_blocked_f32,
                      {"gemm_fp8_block_cpu_blocked_f32", "gemm_fp8_block", "cpu", "blocked", DType::f32, DType::f32,
                       DType::f32,
                       "DeepGEMM's form: 4x32 FMA micro-kernel per 128-block, promoted by fma(x_scale*w_scale, p, acc)"},
                      blocked);
DG_REGISTER_CANDIDATE(gemm_fp8_block_cpu_deepgemm_bf16,
                      {"gemm_fp8_block_cpu_deepgemm_bf16", "gemm_fp8_block", "cpu", "deepgemm", DType::f32, DType::tf32,
                       DType::bf16,
                       "a Hopper FP8 kernel's numerics: 14-bit truncating partials, f32 promotion every 128 k, bf16 y"},
                      per_output(true));

}  // namespace dg
