// Input regimes and suites of mhc (reference/mhc.h; notes/model-ops.md sections 1.6, 2 and 5). The
// streams X [T,4,H] and the sublayer output Fo [T,H] are stored in the case's dtype; the site's
// parameters (F, s, b) in f32, as the checkpoints keep the mHC parameters.
//
// F ~ N(0, 1/(4H)), so that a = F f has unit variance for a unit-RMS f. Stream j has its own scale
// sd_j = 2^U(-1/2, 1/2) (drawn once per case): the streams of a trained residual differ in size, so
// a norm taken per stream differs from the flattened one.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/dists.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/ops/mhc.h"

namespace dg {
namespace {

using namespace dists;

constexpr int64_t n = kMhcStreams;

// What differs between regimes: the streams' and Fo's distributions (before the per-stream scale),
// one stream's extra factor, the scales s and the biases.
struct Shape {
  Dist x, fo;
  double big_stream = 1;          // stream (seed mod 4) is multiplied by this
  double s[3] = {0.5, 0.5, 1.0};  // s0, s1, s2
  double b_pre = 0.0;             // b_pre = b_pre + N(0,1)
  double b_pre_sd = 1.0;
  double comb_peak = 0.0;         // added to b_comb at one column per row (rows 0 and 1: the same column)
};

void put(TensorMap& in, const std::string& name, std::vector<int64_t> shape, const std::vector<double>& v) {
  Tensor t(DType::f32, std::move(shape));
  t.write(0, v);
  in[name] = std::move(t);
}

// b_pre ~ b_pre + N(0, sd^2), b_post ~ N(0,1), b_comb = 1.5 on the diagonal + N(0, 0.5^2): the
// residual mix starts near the identity (as mHC initializes it) and trains away from it.
std::vector<double> biases(const Case& c, const Shape& sh) {
  std::vector<double> z(kMhcMaps), b(kMhcMaps);
  TensorRng(c.seed(), c.str(), "bias").normal(0, z);
  for (int64_t j = 0; j < n; ++j) {
    b[static_cast<size_t>(j)] = sh.b_pre + sh.b_pre_sd * z[static_cast<size_t>(j)];
    b[static_cast<size_t>(n + j)] = z[static_cast<size_t>(n + j)];
  }
  for (int64_t i = 0; i < n * n; ++i) b[static_cast<size_t>(2 * n + i)] = (i / n == i % n ? 1.5 : 0.0) + 0.5 * z[static_cast<size_t>(2 * n + i)];
  if (sh.comb_peak > 0) {
    const TensorRng rng(c.seed(), c.str(), "comb_peaks");
    for (int64_t j = 0; j < n; ++j) {
      const int64_t col = static_cast<int64_t>(rng.bits(static_cast<uint64_t>(j == 1 ? 0 : j)) % n);
      b[static_cast<size_t>(2 * n + j * n + col)] += sh.comb_peak;
    }
  }
  return b;
}

void generate(const Case& c, TensorMap& in, const Shape& sh) {
  const MhcParams p = mhc_params(c);
  std::vector<double> u(n);
  TensorRng(c.seed(), c.str(), "stream_scale").uniform(0, u);
  for (int64_t j = 0; j < n; ++j) u[static_cast<size_t>(j)] = std::exp2(u[static_cast<size_t>(j)] - 0.5);
  u[c.seed() % n] *= sh.big_stream;
  const int64_t H = p.H;
  make(in, c, "x", c.dtype(), {p.T, n, H}, [&](const TensorRng& r, uint64_t i0, std::span<double> out) {
    sh.x(r, i0, out);
    for (size_t i = 0; i < out.size(); ++i) out[i] *= u[((i0 + i) / static_cast<uint64_t>(H)) % n];
  });
  make(in, c, "f_out", c.dtype(), {p.T, H}, sh.fo);
  Tensor phi(DType::f32, {kMhcMaps, n * H});
  fill(phi, c, "phi", normal(1.0 / std::sqrt(static_cast<double>(n * H))));
  in["phi"] = std::move(phi);
  put(in, "scale", {3}, {sh.s[0], sh.s[1], sh.s[2]});
  put(in, "bias", {kMhcMaps}, biases(c, sh));
}

Shape typical() { return {normal(1.0), normal(1.0)}; }

struct RegisterMhcRegimes {
  RegisterMhcRegimes() {
    register_regime({"typical", "mhc",
                     "trained-like: streams N(0, sd_j^2) (sd_j = 2^U(-1/2,1/2)), Fo N(0,1), F N(0, 1/(4H)), s = (0.5, 0.5, "
                     "1), b_pre and b_post N(0,1), b_comb 1.5 I + N(0, 0.5^2): a comb near the identity, Sinkhorn converged",
                     {}, [](const Case& c, TensorMap& in) { generate(c, in, typical()); }});
    register_regime({"peaked_comb", "mhc",
                     "saturated maps: comb logits a_comb s2 + b_comb with s2 = 8 and +100 on one column of each row "
                     "(rows 0 and 1 on the same column, the others drawn): the logits reach 100-130 (f32 exp overflows "
                     "above 88 without the max subtracted), softmax rows are one-hot to e^-50 (no near tie: a tie would "
                     "take |a| ~ 6) and collide in a column, "
                     "so the +1e-6 holds most of C's mass and Sinkhorn converges slowly (20 iterations are not its "
                     "limit); and the pre gates closed (b_pre = -17 + N(0, 0.5^2): sigmoid ~ 4e-8, so pre is mostly "
                     "its +1e-6)",
                     {}, [](const Case& c, TensorMap& in) {
                       Shape sh = typical();
                       sh.s[2] = 8.0;
                       sh.comb_peak = 100.0;
                       sh.b_pre = -17.0;
                       sh.b_pre_sd = 0.5;
                       generate(c, in, sh);
                     }});
    register_regime({"tiny_streams", "mhc",
                     "streams and Fo N(0, (1e-3 sd_j)^2): mean(x^2) ~ 1e-6 is below the norm's eps 1e-5, whose value "
                     "and place (inside the root, one for the flattened streams) set f and so every map",
                     {}, [](const Case& c, TensorMap& in) {
                       Shape sh = typical();
                       sh.x = sh.fo = normal(1e-3);
                       generate(c, in, sh);
                     }});
    register_regime({"large_streams", "mhc",
                     "streams N(0, 1024^2) with two massive channels per stream of +-(1e5 .. 4e5) (dists::massive_channels), "
                     "Fo N(0,1): bf16's spacing at the streams' values is 8 .. 2048, the sum of squares ~1e14 (f32 holds it), "
                     "and the post term falls below the new streams' rounding",
                     {}, [](const Case& c, TensorMap& in) {
                       Shape sh = typical();
                       sh.x = massive_channels(c.integer("H"), 1024.0);
                       generate(c, in, sh);
                     }});
    register_regime({"uneven_streams", "mhc",
                     "the typical inputs with stream (seed mod 4) 300 times the others: it dominates the flattened norm "
                     "(a per-stream norm differs completely) and each new stream's mix",
                     {}, [](const Case& c, TensorMap& in) {
                       Shape sh = typical();
                       sh.big_stream = 300.0;
                       generate(c, in, sh);
                     }});
  }
};
const RegisterMhcRegimes register_mhc_regimes;

// Suites. GLM-5.3-Flash's hidden size 4096 (4H = 16384: notes/model-ops.md section 2) and smaller H
// for the regimes whose point is the maps, not the norm's length; T = 1 a decode step, 16-64 a
// prefill chunk. The gate's reference is the f64 tier (Dot2 sums; --certify measures it).
DG_REGISTER_SUITE(mhc_smoke,
                  Suite{"mhc-smoke", "small mhc cases: every regime, dtype, H and iteration count (seconds)",
                        {
                            "mhc(T=4,H=4096,regime=typical,dtype=bf16,seed=0)",
                            "mhc(T=8,H=256,regime=peaked_comb,dtype=bf16,seed=0)",
                            "mhc(T=1,H=1024,regime=tiny_streams,dtype=f32,seed=0)",
                            "mhc(T=4,H=1024,regime=large_streams,dtype=bf16,seed=0)",
                            "mhc(T=8,H=64,iters=7,regime=uneven_streams,dtype=bf16,seed=0)",
                        },
                        "f64"});
DG_REGISTER_SUITE(mhc_gate,
                  Suite{"mhc-gate", "the mhc merge gate: GLM-5.3-Flash's H = 4096 and smaller, decode and prefill, every "
                        "regime and dtype, another iteration count; f64 reference",
                        {
                            "mhc(T=32,H=4096,regime=typical,dtype=bf16,seed=0)",
                            "mhc(T=1,H=4096,regime=peaked_comb,dtype=bf16,seed=0)",
                            "mhc(T=64,H=256,regime=peaked_comb,dtype=bf16,seed=0)",
                            "mhc(T=32,H=256,iters=10,regime=peaked_comb,dtype=f32,seed=0)",
                            "mhc(T=32,H=1024,regime=tiny_streams,dtype=bf16,seed=0)",
                            "mhc(T=16,H=4096,regime=large_streams,dtype=bf16,seed=0)",
                            "mhc(T=32,H=1024,regime=uneven_streams,dtype=bf16,seed=0)",
                            "mhc(T=32,H=64,regime=typical,dtype=f32,seed=0)",
                        },
                        "f64"});

}  // namespace
}  // namespace dg
