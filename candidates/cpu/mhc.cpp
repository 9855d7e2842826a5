// CPU candidates of mhc (reference/mhc.h). Per token, in f32:
//   mhc_cpu_naive_f32   the policy's naive: f = x / sqrt(sum x^2 / 4H + 1e-5) elementwise, then
//                       a = F f, plain loops (acc = acc + a*b in increasing index); the gates,
//                       softmax and 20 Sinkhorn iterations as mhc.h writes them; post and C cast to
//                       the streams' dtype; the mixes in plain f32; every output in f32
//   mhc_cpu_fused_f32   production's form (GLM-5.3-Flash's kernels, bf16 streams): the norm fused
//                       with the projection (sum x^2 and the 24 dot products F x, each in 32
//                       strided FMA lanes and a pairwise tree as a warp or a GEMM tile reduces,
//                       then a = r (F x)); Sinkhorn in f32; post and C cast to bf16; the mixes by FMA in
//                       f32, rounded once to bf16. It reads the streams and Fo as bf16 (one rounding
//                       on an f32 case) and casts to bf16 whatever the case's dtype
// C (f32 for both) is the Sinkhorn result before the cast. Inputs are read as f32 (exact for bf16
// and f32 storage).
#include <cmath>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/mhc.h"

namespace dg {
namespace {

constexpr int64_t n = kMhcStreams;
constexpr float kEps = static_cast<float>(kMhcEps);

float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// pre, post and C of one token from its 24 projections a (mhc.h), in f32.
struct Maps {
  float pre[n], post[n], C[n * n];
};

void normalize(float* C, bool rows) {
  for (int64_t a = 0; a < n; ++a) {
    float s = 0.0f;
    for (int64_t b = 0; b < n; ++b) s += C[rows ? a * n + b : b * n + a];
    for (int64_t b = 0; b < n; ++b) C[rows ? a * n + b : b * n + a] /= s + kEps;
  }
}

Maps maps(const float* a, const float* s, const float* b, int64_t iters) {
  Maps m;
  for (int64_t j = 0; j < n; ++j) {
    m.pre[j] = sigmoid(a[j] * s[0] + b[j]) + kEps;
    m.post[j] = 2.0f * sigmoid(a[n + j] * s[1] + b[n + j]);
  }
  for (int64_t j = 0; j < n; ++j) {
    float L[n], mx = -INFINITY, sum = 0.0f;
    for (int64_t k = 0; k < n; ++k) mx = std::fmax(mx, L[k] = a[2 * n + j * n + k] * s[2] + b[2 * n + j * n + k]);
    for (int64_t k = 0; k < n; ++k) sum += L[k] = std::exp(L[k] - mx);
    for (int64_t k = 0; k < n; ++k) m.C[j * n + k] = L[k] / sum + kEps;
  }
  normalize(m.C, false);
  for (int64_t it = 1; it < iters; ++it) {
    normalize(m.C, true);
    normalize(m.C, false);
  }
  return m;
}

// sum_i a_i b_i as a warp reduces it: 32 strided FMA lanes (lane l sums i = l, l + 32, ...), then a
// pairwise tree 16, 8, 4, 2, 1 over the lanes.
float lane_dot(const float* a, const float* b, int64_t len) {
  float lane[32] = {};
  for (int64_t i = 0; i < len; ++i) lane[i % 32] = std::fma(a[i], b[i], lane[i % 32]);
  for (int w = 16; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) lane[l] += lane[l + w];
  return lane[0];
}

// The 24 projections of token row x (4H): naive, f = x r then F f by plain sequential sums; fused,
// r (F x) with every sum over 4H by lane_dot (the projection GEMM's f32 accumulation).
void project(const std::vector<float>& phi, const float* x, int64_t D, bool fused, float* a) {
  float ss = 0.0f;
  if (fused) ss = lane_dot(x, x, D);
  else
    for (int64_t i = 0; i < D; ++i) ss = ss + x[i] * x[i];
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(D) + static_cast<float>(kMhcNormEps));
  std::vector<float> f(x, x + D);
  for (int64_t m = 0; m < kMhcMaps; ++m) {
    const float* w = phi.data() + m * D;
    if (fused) {
      a[m] = lane_dot(w, x, D) * r;
      continue;
    }
    if (m == 0)
      for (float& v : f) v *= r;
    float acc = 0.0f;
    for (int64_t i = 0; i < D; ++i) acc = acc + w[i] * f[static_cast<size_t>(i)];
    a[m] = acc;
  }
}

// x_in (H) and x_out (4H) of one token, post and C already cast: acc + c * v in f32 in increasing j
// (naive) or by FMA (fused), the post term first.
void mix(const Maps& m, const float* x, const float* fo, int64_t H, bool fused, float* xin, float* xout) {
  const auto step = [fused](float acc, float c, float v) { return fused ? std::fma(c, v, acc) : acc + c * v; };
  for (int64_t h = 0; h < H; ++h) {
    float acc = 0.0f;
    for (int64_t j = 0; j < n; ++j) acc = step(acc, m.pre[j], x[j * H + h]);
    xin[h] = acc;
    for (int64_t k = 0; k < n; ++k) {
      float y = m.post[k] * fo[h];
      for (int64_t j = 0; j < n; ++j) y = step(y, m.C[j * n + k], x[j * H + h]);   // C[j,k]: the transpose
      xout[k * H + h] = y;
    }
  }
}

RunFn make(bool fused) {
  return [fused](const Case& c, const TensorMap& in, TensorMap& out) {
    const MhcParams p = mhc_params(c);
    const int64_t T = p.T, H = p.H, D = n * H;
    std::vector<float> phi(static_cast<size_t>(kMhcMaps * D)), x(static_cast<size_t>(D)), fo(static_cast<size_t>(H)),
        xin(static_cast<size_t>(H)), xout(static_cast<size_t>(D));
    float s[3], b[kMhcMaps], a[kMhcMaps];
    load_row(need(in, "phi", "mhc"), 0, kMhcMaps * D, phi.data());
    load_row(need(in, "scale", "mhc"), 0, 3, s);
    load_row(need(in, "bias", "mhc"), 0, kMhcMaps, b);
    for (int64_t t = 0; t < T; ++t) {
      load_row(need(in, "x", "mhc"), t * D, D, x.data());
      load_row(need(in, "f_out", "mhc"), t * H, H, fo.data());
      if (fused) {   // bf16 streams (the kernel's storage): exact for bf16 cases, one rounding for f32
        for (float& v : x) v = round_bf16(v);
        for (float& v : fo) v = round_bf16(v);
      }
      project(phi, x.data(), D, fused, a);
      Maps m = maps(a, s, b, p.iters);
      store_row(need_out(out, "C", T * n * n, "mhc"), t * n * n, n * n, m.C);
      const DType cast = fused ? DType::bf16 : p.dtype;   // the casts before the mix
      for (float& v : m.post) v = static_cast<float>(round_to(cast, v));
      for (float& v : m.C) v = static_cast<float>(round_to(cast, v));
      mix(m, x.data(), fo.data(), H, fused, xin.data(), xout.data());
      store_row(need_out(out, "x_in", T * H, "mhc"), t * H, H, xin.data());   // one rounding into the output dtype
      store_row(need_out(out, "x_out", T * D, "mhc"), t * D, D, xout.data());
    }
  };
}

}  // namespace

DG_REGISTER_CANDIDATE(mhc_cpu_naive_f32,
                      {"mhc_cpu_naive_f32", "mhc", "cpu", "naive", DType::f32, DType::f32, DType::f32,
                       "plain f32 loops: f = x r, a = F f, gates, softmax, Sinkhorn, casts, mixes (the policy's naive)"},
                      make(false));
DG_REGISTER_CANDIDATE(mhc_cpu_fused_f32,
                      {"mhc_cpu_fused_f32", "mhc", "cpu", "fused", DType::bf16, DType::f32, DType::bf16,
                       "production's form: norm fused with the F projection (FMA), f32 Sinkhorn, post and C cast to "
                       "bf16, FMA mixes in f32, bf16 streams out"},
                      make(true));

}  // namespace dg
