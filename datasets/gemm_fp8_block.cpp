// Input regimes and suites of gemm_fp8_block (reference/gemm_fp8_block.h; notes/model-ops.md sections
// 2 and 5). x and w are stored in e4m3, their scales in f32, quantized as the FP8 checkpoints and
// the serving engines quantize them: a block's scale is amax / 448 in f32 (e4m3's largest finite
// value; vLLM's per_token_group_quant_fp8 with its amax floor of 1e-10) and its values x / scale in
// f32, then rounded to e4m3 with saturation (cvt.rn.satfinite).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "datasets/dists.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/core/threads.h"
#include "harness/ops/gemm_fp8_block.h"

namespace dg {
namespace {

using namespace dists;

constexpr float kE4m3Max = 448.0f;

// Rows [r0, r0 + rows) of a [*,K] tensor quantized in blocks of `bh` rows x 128 columns: `real` holds
// their unquantized values (f32), q the e4m3 values out, s the blocks' scales (row-major [.., K/128]).
void quantize_blocks(const std::vector<float>& real, int64_t rows, int64_t K, std::vector<double>& q,
                     std::vector<double>& s) {
  const int64_t KB = K / kFp8Block;
  q.resize(real.size());
  s.assign(static_cast<size_t>(KB), 0.0);
  for (int64_t b = 0; b < KB; ++b) {
    float amax = 1e-10f;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = b * kFp8Block; k < (b + 1) * kFp8Block; ++k)
        amax = std::max(amax, std::fabs(real[static_cast<size_t>(r * K + k)]));
    const float scale = amax / kE4m3Max;
    s[static_cast<size_t>(b)] = scale;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = b * kFp8Block; k < (b + 1) * kFp8Block; ++k) {
        const size_t i = static_cast<size_t>(r * K + k);
        q[i] = round_to(DType::e4m3, static_cast<double>(real[i] / scale));
      }
  }
}

// `name` [R,K] in e4m3 and `name`_scale [ceil(R/bh),K/128] in f32, from unquantized values drawn from
// `d` (rounded to `src`, the dtype the layer held them in) and quantized in blocks of bh x 128.
void make_quantized(TensorMap& in, const Case& c, const std::string& name, int64_t R, int64_t K, int64_t bh,
                    const Dist& d, DType src) {
  const int64_t KB = K / kFp8Block, RB = (R + bh - 1) / bh;
  Tensor q(DType::e4m3, {R, K}), s(DType::f32, {RB, KB});
  const TensorRng rng(c.seed(), c.str(), name);
  parallel_for(RB, [&](int64_t b0, int64_t b1) {
    std::vector<double> buf;
    std::vector<float> real;
    std::vector<double> qv, sv;
    for (int64_t rb = b0; rb < b1; ++rb) {
      const int64_t r0 = rb * bh, rows = std::min(bh, R - r0);
      buf.resize(static_cast<size_t>(rows * K));
      d(rng, static_cast<uint64_t>(r0 * K), buf);
      real.resize(buf.size());
      for (size_t i = 0; i < buf.size(); ++i) real[i] = static_cast<float>(round_to(src, buf[i]));
      quantize_blocks(real, rows, K, qv, sv);
      q.write(r0 * K, qv);
      s.write(rb * KB, sv);
    }
  });
  in[name] = std::move(q);
  in[name + "_scale"] = std::move(s);
}

// Uniform over e4m3's finite codes (both signs, subnormals to 448; never the NaN codes 0x7F, 0xFF).
Dist e4m3_codes() {
  return [](const TensorRng& r, uint64_t i0, std::span<double> out) {
    for (size_t j = 0; j < out.size(); ++j) {
      const uint64_t code = r.bits(i0 + j) % 254;   // 0 .. 253: skip 0x7F, then the negatives
      out[j] = decode(DType::e4m3, code < 127 ? code : code + 1);
    }
  };
}

// Block scales log-uniform in [2^lo, 2^hi]; block b of every row with b % 7 == 3 is an outlier, 2^out
// times larger.
Dist wide_scales(int64_t KB, double lo, double hi, double out) {
  return [=](const TensorRng& r, uint64_t i0, std::span<double> v) {
    r.uniform(i0, v);
    for (size_t j = 0; j < v.size(); ++j) {
      const int64_t b = static_cast<int64_t>((i0 + j) % static_cast<uint64_t>(KB));
      v[j] = std::exp2(lo + (hi - lo) * v[j] + (b % 7 == 3 ? out : 0.0));
    }
  };
}

struct RegisterGemmFp8BlockRegimes {
  RegisterGemmFp8BlockRegimes() {
    register_regime({"production", "gemm_fp8_block",
                     "bf16 hidden states N(0,1) with two massive channels (K/7, K/3) of +-(100..400) quantized per "
                     "1 x 128 block, bf16 weights N(0, 1/K) quantized per 128 x 128 block (scale amax/448)",
                     {},
                     [](const Case& c, TensorMap& in) {
                       const GemmFp8BlockParams p = gemm_fp8_block_params(c);
                       make_quantized(in, c, "x", p.M, p.K, 1, massive_channels(p.K, 1.0), DType::bf16);
                       make_quantized(in, c, "w", p.N, p.K, kFp8Block, normal(1.0 / std::sqrt(static_cast<double>(p.K))),
                                      DType::bf16);
                     }});
    register_regime({"wide_range", "gemm_fp8_block",
                     "every finite e4m3 code equally likely (subnormals to +-448), x's block scales log-uniform in "
                     "2^-12..2^12 and w's in 2^-10..2^4, every 7th block (b % 7 = 3) 2^10 times larger: blocks' "
                     "terms span 2^60, outlier blocks dominate, the rest must still be accumulated",
                     {},
                     [](const Case& c, TensorMap& in) {
                       const GemmFp8BlockParams p = gemm_fp8_block_params(c);
                       make(in, c, "x", DType::e4m3, {p.M, p.K}, e4m3_codes());
                       make(in, c, "w", DType::e4m3, {p.N, p.K}, e4m3_codes());
                       make(in, c, "x_scale", DType::f32, {p.M, p.kb()}, wide_scales(p.kb(), -12, 12, 10));
                       make(in, c, "w_scale", DType::f32, {p.nb(), p.kb()}, wide_scales(p.kb(), -10, 4, 0));
                     }});
  }
};
const RegisterGemmFp8BlockRegimes register_gemm_fp8_block_regimes;

// Suites. Shapes from the configs (notes/model-ops.md section 2): hidden 4096 (GLM-4.5-Air,
// GLM-5.3-Flash), 5120 (GLM-4.5/4.6/4.7), 6144 (GLM-5.x), 7168 (DeepSeek-V3); experts' gate_up
// [2I, H] and down [H, I] with I = 1408 (GLM-4.5-Air), 1536 (GLM-4.5) and 2048 (GLM-5.x); M = 1 and
// 16 decode tokens (the gate stays about a minute under `driftgate mutants`). The gate's reference is the f64 tier (the partials exact,
// Dot2 across blocks: `driftgate verify --certify` measures it against dd).
DG_REGISTER_SUITE(gemm_fp8_block_smoke,
                  Suite{"gemm-fp8-block-smoke", "small gemm_fp8_block cases: both regimes, decode, one block, a partial "
                        "weight-scale block, K up to 7168 (seconds)",
                        {
                            "gemm_fp8_block(M=16,N=512,K=4096,regime=production,dtype=e4m3,seed=0)",
                            "gemm_fp8_block(M=1,N=300,K=2048,regime=production,dtype=e4m3,seed=0)",
                            "gemm_fp8_block(M=8,N=256,K=128,regime=wide_range,dtype=e4m3,seed=0)",
                            "gemm_fp8_block(M=4,N=200,K=7168,regime=wide_range,dtype=e4m3,seed=0)",
                        }});
DG_REGISTER_SUITE(gemm_fp8_block_gate,
                  Suite{"gemm-fp8-block-gate", "the gemm_fp8_block merge gate: the configs' projections and experts at "
                        "decode and prefill, wide block ranges with outlier blocks, one block, a partial weight-scale "
                        "block; f64 reference",
                        {
                            "gemm_fp8_block(M=16,N=4096,K=7168,regime=production,dtype=e4m3,seed=0)",
                            "gemm_fp8_block(M=1,N=6144,K=6144,regime=production,dtype=e4m3,seed=0)",
                            "gemm_fp8_block(M=16,N=2816,K=4096,regime=production,dtype=e4m3,seed=0)",
                            "gemm_fp8_block(M=16,N=5120,K=1536,regime=production,dtype=e4m3,seed=0)",
                            "gemm_fp8_block(M=16,N=1000,K=7168,regime=wide_range,dtype=e4m3,seed=0)",
                            "gemm_fp8_block(M=16,N=2048,K=128,regime=wide_range,dtype=e4m3,seed=0)",
                        },
                        "f64"});

// The lm_head alone (0.63 GB of e4m3 weights), as gemm-lm-head: M = 1, GLM-5.x's vocabulary 154880.
DG_REGISTER_SUITE(gemm_fp8_block_lm_head,
                  Suite{"gemm-fp8-block-lm-head", "the FP8 lm_head at decode: M = 1, vocabulary 154880, hidden 4096; "
                        "f64 reference",
                        {"gemm_fp8_block(M=1,N=154880,K=4096,regime=production,dtype=e4m3,seed=0)"},
                        "f64"});

}  // namespace
}  // namespace dg
