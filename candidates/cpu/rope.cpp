// CPU candidates of rope (reference/rope.h):
//   rope_cpu_naive_f32   the policy's naive: plain loops; inv_freq = pow(theta, -2i/d_rope) and the
//                        angle pos * inv_freq in double (off by at most ~2^-29 rad at 2^24, below an
//                        f32 cos/sin's rounding, so it stays honest at 1M positions), cos and sin in
//                        double rounded to f32, then y_a = x_a c - x_b s, y_b = x_b c + x_a s in f32
//   rope_cpu_cache_bf16  vLLM's rotary_embedding numerics in a bf16 model: a cos/sin cache per
//                        position (computed once per process in extended precision, then stored in
//                        the model dtype, as vLLM keeps cos_sin_cache), bf16 x, and the kernel's scalar_t
//                        arithmetic: x * cos and y * sin each rounded to bf16, their difference (sum)
//                        rounded to bf16 (c10::BFloat16's operators round every result)
//   rope_cpu_cache_f32   the same kernel in an f32 model: f32 cache, f32 x and arithmetic
// x is read as f32 (exact for bf16 and f32 storage); dims d_rope .. D-1 are copied.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/rope.h"

namespace dg {
namespace {

// The token loop every candidate shares: cos/sin of token t into c, s (d_rope/2 each), then every
// head of x rotated by `pair(xa, xb, c, s, ya, yb)`.
template <class Angles, class Pair>
void rotate_all(const Case& c, const TensorMap& in, TensorMap& out, bool bf16_in, Angles angles, Pair pair) {
  const RopeParams p = rope_params(c);
  const int64_t half = p.d_rope / 2, HD = p.H * p.D;
  const Tensor& x = need(in, "x", "rope");
  const int64_t* pos = need(in, "positions", "rope").data<int64_t>();
  Tensor& y = need_out(out, "y", p.T * HD, "rope");
  std::vector<float> row(static_cast<size_t>(HD)), cs(static_cast<size_t>(half)), sn(cs.size());
  for (int64_t t = 0; t < p.T; ++t) {
    angles(pos[t], cs.data(), sn.data());
    load_row(x, t * HD, HD, row.data());
    if (bf16_in)
      for (float& v : row) v = round_bf16(v);
    for (int64_t h = 0; h < p.H; ++h) {
      float* xh = row.data() + h * p.D;
      for (int64_t i = 0; i < half; ++i) {
        int64_t a = 0, b = 0;
        rope_pair_dims(p.style, i, p.d_rope, a, b);
        float ya = 0, yb = 0;
        pair(xh[a], xh[b], cs[static_cast<size_t>(i)], sn[static_cast<size_t>(i)], ya, yb);
        xh[a] = ya;
        xh[b] = yb;
      }
    }
    store_row(y, t * HD, HD, row.data());
  }
}

void run_naive(const Case& c, const TensorMap& in, TensorMap& out) {
  const RopeParams p = rope_params(c);
  std::vector<double> inv(static_cast<size_t>(p.d_rope / 2));
  for (size_t i = 0; i < inv.size(); ++i) inv[i] = std::pow(p.theta, -2.0 * static_cast<double>(i) / static_cast<double>(p.d_rope));
  rotate_all(
      c, in, out, false,
      [&](int64_t pos, float* cs, float* sn) {
        for (size_t i = 0; i < inv.size(); ++i) {
          const double phi = static_cast<double>(pos) * inv[i];
          cs[i] = static_cast<float>(std::cos(phi));
          sn[i] = static_cast<float>(std::sin(phi));
        }
      },
      [](float xa, float xb, float cv, float sv, float& ya, float& yb) {
        ya = xa * cv - xb * sv;
        yb = xb * cv + xa * sv;
      });
}

// vLLM's cos_sin_cache, built once per process (vLLM builds it when the model loads) and kept for
// later calls: per (theta, d_rope, dtype), cos and sin of each position as it is first seen, each in
// long double (64-bit significand: the angle is off by at most 2^-40 rad at 2^24), rounded to f32
// and, for a bf16 model, from there to bf16. Entry: [cos_0 .. cos_{h-1}, sin_0 .. sin_{h-1}].
class CosSinCache {
 public:
  // The entries of every position of the case, in token order (stable: std::map nodes never move).
  std::vector<const std::vector<float>*> entries(const RopeParams& p, const int64_t* pos, bool bf16) {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<int64_t, std::vector<float>>& table = tables_[{p.theta, p.d_rope, bf16}];
    std::vector<const std::vector<float>*> out(static_cast<size_t>(p.T));
    for (int64_t t = 0; t < p.T; ++t) {
      std::vector<float>& e = table[pos[t]];
      if (e.empty()) e = entry(p, pos[t], bf16);
      out[static_cast<size_t>(t)] = &e;
    }
    return out;
  }

 private:
  static std::vector<float> entry(const RopeParams& p, int64_t pos, bool bf16) {
    const int64_t half = p.d_rope / 2;
    std::vector<float> e(static_cast<size_t>(2 * half));
    for (int64_t i = 0; i < half; ++i) {
      const long double inv = std::pow(static_cast<long double>(p.theta),
                                       -2.0L * static_cast<long double>(i) / static_cast<long double>(p.d_rope));
      const long double phi = static_cast<long double>(pos) * inv;
      float cv = static_cast<float>(std::cos(phi)), sv = static_cast<float>(std::sin(phi));
      if (bf16) {   // through f32, as vLLM builds the cache in f32 and then casts it to the model dtype
        cv = round_bf16(cv);
        sv = round_bf16(sv);
      }
      e[static_cast<size_t>(i)] = cv;
      e[static_cast<size_t>(half + i)] = sv;
    }
    return e;
  }
  std::mutex mu_;
  std::map<std::tuple<double, int64_t, bool>, std::map<int64_t, std::vector<float>>> tables_;
};

RunFn make_cache(bool bf16) {
  return [bf16](const Case& c, const TensorMap& in, TensorMap& out) {
    static CosSinCache cache;
    const RopeParams p = rope_params(c);
    const std::vector<const std::vector<float>*> entries = cache.entries(p, need(in, "positions", "rope").data<int64_t>(), bf16);
    const auto half = static_cast<std::ptrdiff_t>(p.d_rope / 2);
    int64_t t = 0;   // rotate_all asks for the tokens' angles in order
    auto angles = [&](int64_t, float* cs, float* sn) {
      const std::vector<float>& e = *entries[static_cast<size_t>(t++)];
      std::copy(e.begin(), e.begin() + half, cs);
      std::copy(e.begin() + half, e.end(), sn);
    };
    if (bf16)
      rotate_all(c, in, out, true, angles, [](float xa, float xb, float cv, float sv, float& ya, float& yb) {
        ya = round_bf16(round_bf16(xa * cv) - round_bf16(xb * sv));
        yb = round_bf16(round_bf16(xb * cv) + round_bf16(xa * sv));
      });
    else
      rotate_all(c, in, out, false, angles, [](float xa, float xb, float cv, float sv, float& ya, float& yb) {
        ya = xa * cv - xb * sv;
        yb = xb * cv + xa * sv;
      });
  };
}

}  // namespace

DG_REGISTER_CANDIDATE(rope_cpu_naive_f32,
                      {"rope_cpu_naive_f32", "rope", "cpu", "naive", DType::f32, DType::f32, DType::f32,
                       "plain loops: angles in double, cos/sin rounded to f32, f32 rotation (the policy's naive)"},
                      run_naive);
DG_REGISTER_CANDIDATE(rope_cpu_cache_f32,
                      {"rope_cpu_cache_f32", "rope", "cpu", "cache", DType::f32, DType::f32, DType::f32,
                       "vLLM's rotary_embedding in an f32 model: a per-position cos/sin cache in f32, f32 arithmetic"},
                      make_cache(false));
DG_REGISTER_CANDIDATE(rope_cpu_cache_bf16,
                      {"rope_cpu_cache_bf16", "rope", "cpu", "cache", DType::bf16, DType::f32, DType::bf16,
                       "vLLM's rotary_embedding in a bf16 model: bf16 cos/sin cache and x, every product and sum rounded to bf16"},
                      make_cache(true));

}  // namespace dg
