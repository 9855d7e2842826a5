// Input regimes and suites of gemm (reference/gemm.h; notes/model-ops.md sections 1.2, 1.7, 1.8, 2
// and 5). x, w and the bias are stored in the case's dtype. Weights ~ N(0, 1/K) (a trained linear
// layer keeps its outputs near the inputs' scale), the bias ~ N(0, 0.1^2).
#include <cmath>
#include <cstdint>
#include <vector>

#include "datasets/dists.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/ops/gemm.h"

namespace dg {
namespace {

using namespace dists;

Dist weight(int64_t K) { return normal(1.0 / std::sqrt(static_cast<double>(K))); }

// N(0, 1/K) rows whose every full block of 32 k is [v, -v] (16 values, then the same negated): each
// row sums to exactly 0 over its full blocks, in any dtype (negation is exact), and the partial sums
// stay small in every order that keeps k's residue mod 16 (sequential, reversed, 4 or 16 k-lanes).
Dist zero_sum_weight(int64_t K) {
  return [K](const TensorRng& r, uint64_t i0, std::span<double> out) {
    const uint64_t from = i0 >= 16 ? i0 - 16 : 0;
    std::vector<double> buf(out.size() + (i0 - from));
    r.normal(from, buf);
    const double sd = 1.0 / std::sqrt(static_cast<double>(K));
    const int64_t full = K - K % 32;
    for (size_t j = 0; j < out.size(); ++j) {
      const uint64_t i = i0 + j;
      const int64_t k = static_cast<int64_t>(i % static_cast<uint64_t>(K));
      out[j] = sd * (k < full && k % 32 >= 16 ? -buf[i - 16 - from] : buf[i - from]);
    }
  };
}

// Magnitudes log-uniform in [2^lo, 2^hi], random signs.
Dist log_uniform(double lo, double hi) {
  return map(uniform(0.0, 1.0), [lo, hi](double u) {
    const double t = u < 0.5 ? 2 * u : 2 * u - 1;
    return (u < 0.5 ? -1.0 : 1.0) * std::exp2(lo + (hi - lo) * t);
  });
}

// N(0,1) with column K/4 of every row = 1e3.
Dist outlier_column(int64_t K) {
  return [K](const TensorRng& r, uint64_t i0, std::span<double> out) {
    r.normal(i0, out);
    for (size_t j = 0; j < out.size(); ++j)
      if (static_cast<int64_t>((i0 + j) % static_cast<uint64_t>(K)) == K / 4) out[j] = 1e3;
  };
}

// x, w, and the bias when the case has one.
void generate(const Case& c, TensorMap& in, const Dist& x, const Dist& w) {
  const GemmParams p = gemm_params(c);
  make(in, c, "x", c.dtype(), {p.M, p.K}, x);
  make(in, c, "w", c.dtype(), {p.N, p.K}, w);
  if (p.bias) make(in, c, "bias", c.dtype(), {p.N}, normal(0.1));
}

struct RegisterGemmRegimes {
  RegisterGemmRegimes() {
    register_regime({"activations", "gemm",
                     "hidden states x ~ N(0,1) with two massive-activation channels (K/7, K/3) of +-(100..400), "
                     "w ~ N(0, 1/K), bias ~ N(0, 0.1^2)",
                     {},
                     [](const Case& c, TensorMap& in) { generate(c, in, massive_channels(c.integer("K"), 1.0), weight(c.integer("K"))); }});
    register_regime({"cancel", "gemm",
                     "x = 1 + N(0, 1e-2^2), each row of w sums to exactly 0 (blocks of 32 k: 16 values, then the "
                     "same negated): the output is ~1e-4 of the sum of |terms|, so accumulation precision shows",
                     {},
                     [](const Case& c, TensorMap& in) {
                       generate(c, in, map(normal(1e-2), [](double z) { return 1.0 + z; }), zero_sum_weight(c.integer("K")));
                     }});
    register_regime({"wide_range", "gemm",
                     "x log-uniform in 2^-8 .. 2^8 and w in 2^-8 .. 2^0 in magnitude, random signs: products span "
                     "2^-16 .. 2^8 and sums stay far below f16's 65504",
                     {}, [](const Case& c, TensorMap& in) { generate(c, in, log_uniform(-8, 8), log_uniform(-8, 0)); }});
    register_regime({"outlier_k", "gemm",
                     "x ~ N(0,1) with column K/4 = 1e3 in every row, w ~ N(0, 1/K): after that term a narrow "
                     "accumulator (bf16: ulp 0.125 at 16) drops every later one",
                     {},
                     [](const Case& c, TensorMap& in) {
                       generate(c, in, outlier_column(c.integer("K")), weight(c.integer("K")));
                     }});
  }
};
const RegisterGemmRegimes register_gemm_regimes;

// Suites. Shapes from the configs (notes/model-ops.md section 2): hidden 2048 (GLM-4.7-Flash), 2304
// (Kimi-Linear), 4096 (GLM-4.5-Air, GLM-5.3-Flash), 5120 (GLM-4.5/4.6/4.7), 6144 (GLM-5.x); experts'
// I 1024 (Kimi) .. 2048 (GLM-5.x); GLM-4.5's QKV 96*128 + 2*8*128 = 14336 outputs with a bias; the
// lm_head's vocabulary 151552. M = 1 and 16 decode tokens, 256 a prefill chunk. Every gate case is
// at least 2^19 outputs or 2^26 multiply-adds, a call well over 100 us; the gate's reference is the
// f64 tier (Dot2: far beyond f32, `driftgate verify --certify` measures it against dd), since dd
// would take minutes over the suite.
DG_REGISTER_SUITE(gemm_smoke,
                  Suite{"gemm-smoke", "small gemm cases: every regime and dtype, bias, decode, odd and long K (seconds)",
                        {
                            "gemm(M=16,N=256,K=4096,regime=activations,dtype=bf16,seed=0)",
                            "gemm(M=1,N=512,K=2050,bias=1,regime=activations,dtype=bf16,seed=0)",
                            "gemm(M=8,N=256,K=1024,regime=cancel,dtype=bf16,seed=0)",
                            "gemm(M=8,N=256,K=1000,regime=cancel,dtype=f32,seed=0)",
                            "gemm(M=4,N=200,K=1000,regime=wide_range,dtype=f16,seed=0)",
                            "gemm(M=8,N=256,K=2048,regime=outlier_k,dtype=bf16,seed=0)",
                            "gemm(M=4,N=100,K=300,bias=1,regime=activations,dtype=f64,seed=0)",
                        }});
DG_REGISTER_SUITE(gemm_gate,
                  Suite{"gemm-gate", "the gemm merge gate: decode and prefill rows, the configs' projections, "
                        "cancellation, wide ranges, an outlier column, odd K, bias, every dtype; f64 reference",
                        {
                            "gemm(M=1,N=14336,K=5120,bias=1,regime=activations,dtype=bf16,seed=0)",
                            "gemm(M=16,N=4096,K=4096,regime=activations,dtype=bf16,seed=0)",
                            "gemm(M=256,N=2304,K=1024,regime=activations,dtype=bf16,seed=0)",
                            "gemm(M=16,N=2048,K=6144,regime=cancel,dtype=bf16,seed=0)",
                            "gemm(M=16,N=5120,K=1536,regime=wide_range,dtype=f32,seed=0)",
                            "gemm(M=16,N=2048,K=4096,regime=wide_range,dtype=f16,seed=0)",
                            "gemm(M=16,N=2048,K=4096,regime=outlier_k,dtype=bf16,seed=0)",
                            "gemm(M=16,N=4096,K=1030,bias=1,regime=activations,dtype=f16,seed=0)",
                            "gemm(M=16,N=2048,K=2048,regime=cancel,dtype=f64,seed=0)",
                        },
                        "f64"});

// The lm_head alone: 1.24 GB of bf16 weights make each isolated run cost seconds of input handling,
// so it is a suite of its own (gemm-gate stays about a minute under `driftgate mutants`).
DG_REGISTER_SUITE(gemm_lm_head,
                  Suite{"gemm-lm-head", "the lm_head projection at decode: M = 1, vocabulary 151552, hidden 4096; f64 reference",
                        {"gemm(M=1,N=151552,K=4096,regime=activations,dtype=bf16,seed=0)"},
                        "f64"});

}  // namespace
}  // namespace dg
