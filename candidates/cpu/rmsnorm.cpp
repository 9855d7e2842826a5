// CPU candidates of rmsnorm and add_rmsnorm (reference/rmsnorm.h):
//   rmsnorm_cpu_naive_f32        the policy's naive: plain f32 loops, s += x*x in increasing i (no
//                                FMA), r = 1 / sqrt(s / D + eps), y = (x * r) * w
//   rmsnorm_cpu_blocked_f32      a GPU block's order in f32: 32 strided lanes accumulate x*x by FMA
//                                (lane j sums i = j, j + 32, ...), then a pairwise tree over the lanes
//                                (a warp's shuffle reduction); y = (x * r) * w
//   rmsnorm_cpu_blocked_bf16     the same reduction with production's rounding points (vLLM rms_norm,
//                                HF RMSNorm): the normalized x * r rounded to bf16, then multiplied by
//                                the bf16 weight and rounded to bf16 again; output bf16
//   add_rmsnorm_*                the same three for the fused residual add: s = x + residual rounded
//                                to the case's dtype (the op's definition: the residual stream is
//                                stored, then squared), written to residual_out, then the norm of s
// Inputs are read as f32 (exact for bf16/f16/f32 storage, one rounding for f64).
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/rmsnorm.h"

namespace dg {
namespace {

enum class Algo { naive, blocked, blocked_bf16 };

// x rounded to the storage dtype dt (the residual stream's); f32 and f64 keep the f32 value.
float round_storage(DType dt, float x) {
  switch (dt) {
    case DType::bf16: return round_bf16(x);
    case DType::f16: return f32_from_f16(f16_from_f32(x));
    default: return x;
  }
}

float sum_squares_naive(const float* x, int64_t D) {
  float s = 0.0f;
  for (int64_t i = 0; i < D; ++i) s = s + x[i] * x[i];
  return s;
}

// 32 strided lanes by FMA, then the pairwise tree 16, 8, 4, 2, 1. The lanes advance 32 elements at
// a time (the loop the compiler vectorizes), then the last D % 32 elements go to lanes 0 .. D % 32 - 1:
// lane j sums i = j, j + 32, ... in increasing i either way.
float sum_squares_blocked(const float* x, int64_t D) {
  float lane[32] = {};
  int64_t i0 = 0;
  for (; i0 + 32 <= D; i0 += 32)
    for (int j = 0; j < 32; ++j) lane[j] = std::fma(x[i0 + j], x[i0 + j], lane[j]);
  for (int j = 0; i0 + j < D; ++j) lane[j] = std::fma(x[i0 + j], x[i0 + j], lane[j]);
  for (int width = 16; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) lane[j] = lane[j] + lane[j + width];
  return lane[0];
}

void norm_row(Algo a, const float* x, const float* w, int64_t D, float eps, float* y) {
  const float ss = a == Algo::naive ? sum_squares_naive(x, D) : sum_squares_blocked(x, D);
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
  for (int64_t i = 0; i < D; ++i) {
    if (a == Algo::blocked_bf16) y[i] = round_bf16(round_bf16(x[i] * r) * w[i]);
    else y[i] = (x[i] * r) * w[i];
  }
}

RunFn make(Algo a, bool add) {
  return [a, add](const Case& c, const TensorMap& in, TensorMap& out) {
    const RmsNormParams p = rmsnorm_params(c);
    const std::string op = c.op();
    const int64_t N = p.N, D = p.D;
    std::vector<float> x(static_cast<size_t>(D)), res(add ? x.size() : 0), w(x.size()), y(x.size());
    load_row(need(in, "weight", op), 0, D, w.data());
    if (a == Algo::blocked_bf16)   // the weight as the production kernel reads it
      for (float& v : w) v = round_bf16(v);
    Tensor& yt = need_out(out, "y", N * D, op);
    Tensor* rt = add ? &need_out(out, "residual_out", N * D, op) : nullptr;
    for (int64_t n = 0; n < N; ++n) {
      load_row(need(in, "x", op), n * D, D, x.data());
      if (add) load_row(need(in, "residual", op), n * D, D, res.data());
      if (a == Algo::blocked_bf16) {   // the inputs as a bf16 kernel reads them
        for (float& v : x) v = round_bf16(v);
        for (float& v : res) v = round_bf16(v);
      }
      if (add) {   // the residual stream, stored in the case's dtype (in bf16 by a bf16 kernel), then squared
        for (size_t i = 0; i < x.size(); ++i) {
          x[i] = round_storage(p.dtype, x[i] + res[i]);
          if (a == Algo::blocked_bf16) x[i] = round_bf16(x[i]);
        }
        store_row(*rt, n * D, D, x.data());
      }
      norm_row(a, x.data(), w.data(), D, static_cast<float>(p.eps), y.data());
      store_row(yt, n * D, D, y.data());
    }
  };
}

CandidateInfo info(const std::string& op, const char* algo, DType dt, const std::string& doc) {
  const std::string name = op + "_cpu_" + algo + "_" + std::string(dg::name(dt));
  return {name, op, "cpu", algo, dt, DType::f32, dt, doc};
}

}  // namespace

DG_REGISTER_CANDIDATE(rmsnorm_cpu_naive_f32,
                      info("rmsnorm", "naive", DType::f32, "plain f32 loops: sum of squares in order, x * r * w (the policy's naive)"),
                      make(Algo::naive, false));
DG_REGISTER_CANDIDATE(rmsnorm_cpu_blocked_f32,
                      info("rmsnorm", "blocked", DType::f32, "a GPU block's reduction (32 strided FMA lanes, pairwise tree) in f32"),
                      make(Algo::blocked, false));
DG_REGISTER_CANDIDATE(rmsnorm_cpu_blocked_bf16,
                      info("rmsnorm", "blocked", DType::bf16, "the block reduction with production's bf16 rounding points (x * r, then * w)"),
                      make(Algo::blocked_bf16, false));
DG_REGISTER_CANDIDATE(add_rmsnorm_cpu_naive_f32,
                      info("add_rmsnorm", "naive", DType::f32, "plain f32 loops: the rounded residual sum, then the naive norm (the policy's naive)"),
                      make(Algo::naive, true));
DG_REGISTER_CANDIDATE(add_rmsnorm_cpu_blocked_f32,
                      info("add_rmsnorm", "blocked", DType::f32, "the rounded residual sum, then a GPU block's reduction in f32"),
                      make(Algo::blocked, true));
DG_REGISTER_CANDIDATE(add_rmsnorm_cpu_blocked_bf16,
                      info("add_rmsnorm", "blocked", DType::bf16, "vLLM fused_add_rms_norm's rounding: residual to the dtype, x * r and * w to bf16"),
                      make(Algo::blocked_bf16, true));

}  // namespace dg
