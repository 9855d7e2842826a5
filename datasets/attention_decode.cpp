// Input regimes and suites of attention_decode (reference/attention_decode.h; notes/model-ops.md
// sections 3 and 5). Every regime lays out the pool the same way: the pages of the batch's
// sequences (one per started page of each) and one spare page, in an order drawn from the case's
// seed, so a sequence's pages are scattered and interleaved with other sequences' pages; the page
// table's entries past a sequence's pages are 0. q and every pool slot (also the unused slots of a
// last partial page and the spare page) are drawn N(0,1) and rounded to the dtype; the regimes then
// shape the scores s = scale q.k through the keys of each sequence's tokens.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "datasets/decode_inputs.h"
#include "datasets/dists.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/attention_decode.h"

namespace dg {
namespace {

using decode_inputs::Layout;
using decode_inputs::Shape;
using decode_inputs::stored;

void generate(const Case& c, TensorMap& in, Shape shape) {
  const Layout l = decode_inputs::layout(c, attention_decode_params(c));
  const AttentionDecodeParams& p = l.p;
  std::vector<double> q(static_cast<size_t>(p.B * p.n_h * p.d)), k(static_cast<size_t>(p.n_pages * p.page * p.n_kv * p.d)),
      v(static_cast<size_t>(p.n_pages * p.page * p.n_kv * p.dv));
  TensorRng(c.seed(), c.str(), "q").normal(0, q);
  TensorRng(c.seed(), c.str(), "k_cache").normal(0, k);
  TensorRng(c.seed(), c.str(), "v_cache").normal(0, v);
  for (double& x : q) x = round_to(c.dtype(), shape == Shape::near_uniform ? 0.01 * x : x);
  if (shape == Shape::few_dominant || shape == Shape::large_logits) decode_inputs::shape_keys(c, shape, l, q, k);
  in["q"] = stored(c.dtype(), {p.B, p.n_h, p.d}, q);
  const DType kv = c.text("kv") == "fp8" ? DType::e4m3 : c.dtype();
  for (double& x : k) x /= p.k_scale;   // FP8 pages hold k / k_scale (saturating at +-448)
  for (double& x : v) x /= p.v_scale;
  in["k_cache"] = stored(kv, {p.n_pages, p.page, p.n_kv, p.d}, std::move(k));
  in["v_cache"] = stored(kv, {p.n_pages, p.page, p.n_kv, p.dv}, std::move(v));
  in["page_table"] = stored(DType::i32, {p.B, p.max_pages}, l.table);
  std::vector<double> lens(l.lens.begin(), l.lens.end());
  in["seqlens"] = stored(DType::i32, {p.B}, lens);
}

struct RegisterAttentionDecodeRegimes {
  RegisterAttentionDecodeRegimes() {
    register_regime({"typical", "attention_decode", "q, k, v ~ N(0,1): scores N(0,1) at the default scale", {},
                     [](const Case& c, TensorMap& in) { generate(c, in, Shape::typical); }});
    register_regime({"few_dominant", "attention_decode",
                     "typical, except three keys per sequence and kv head (one the last token) aligned with the group's "
                     "mean query to a score of 14: at long context a few keys hold most of the weight and the rest a "
                     "long tail",
                     {}, [](const Case& c, TensorMap& in) { generate(c, in, Shape::few_dominant); }});
    register_regime({"near_uniform", "attention_decode",
                     "q ~ N(0, 0.01^2): scores nearly equal, o ~ the mean of v (a cancelling sum of ~1/sqrt(L) of its terms)",
                     {}, [](const Case& c, TensorMap& in) { generate(c, in, Shape::near_uniform); }});
    register_regime({"large_logits", "attention_decode",
                     "every key aligned with its group's mean query to scores near +100 (even sequences) or -100 (odd), "
                     "spread N(0, ~1/4): exp(s) overflows (or underflows) f32 without the max subtraction",
                     {}, [](const Case& c, TensorMap& in) { generate(c, in, Shape::large_logits); }});
    register_regime({"ragged", "attention_decode",
                     "typical inputs; without lens=, lengths cycle over ctx, 0, 1, ctx/2 + 3, page + 1 along the batch",
                     {}, [](const Case& c, TensorMap& in) { generate(c, in, Shape::typical); }});
    register_regime({"empty_splits", "attention_decode",
                     "typical inputs; without lens=, short lengths cycling over 0, 1, page - 1, page + 1, so that with "
                     "split > 1 splits get no keys (the -inf guard) and a length 0 leaves every split empty",
                     {}, [](const Case& c, TensorMap& in) { generate(c, in, Shape::typical); }});
  }
};
const RegisterAttentionDecodeRegimes register_attention_decode_regimes;


// Suites. Shapes from the configs (notes/model-ops.md section 2): GLM-4.x's 96 q heads over 8 kv
// heads of 128 give groups of 12; here fewer heads per case (the math of a head does not depend on
// the others) with groups of 1 (MHA), 2, 4 and 12 and MQA; vLLM's page 16, SGLang's page 1,
// FlashMLA's 64; split counts of 1 (none) to 16, with splits left empty; one long context of 32K
// with a few dominant keys. dd reference.
DG_REGISTER_SUITE(attention_decode_smoke,
                  Suite{"attention-decode-smoke", "small attention_decode cases: every regime and dtype, FP8 pages, GQA, MHA and MQA, "
                        "pages of 1, 16 and 64, no split, several and empty ones, ragged lengths with 0 and 1, dv != d, "
                        "one 32K context (seconds)",
                        {
                            "attention_decode(B=4,n_h=8,n_kv=2,d=128,page=16,split=1,ctx=300,regime=typical,dtype=bf16,seed=0)",
                            "attention_decode(B=3,n_h=8,n_kv=2,d=128,page=16,split=7,ctx=300,regime=typical,dtype=bf16,seed=0)",
                            "attention_decode(B=5,n_h=4,n_kv=4,d=64,page=16,split=3,ctx=200,regime=ragged,dtype=bf16,seed=0)",
                            "attention_decode(B=4,n_h=4,n_kv=1,d=64,page=16,split=4,ctx=64,regime=empty_splits,dtype=bf16,seed=0)",
                            "attention_decode(B=2,n_h=8,n_kv=2,d=128,page=16,split=2,ctx=256,regime=large_logits,dtype=bf16,seed=0)",
                            "attention_decode(B=2,n_h=4,n_kv=2,d=128,page=1,split=4,ctx=1000,regime=near_uniform,dtype=f16,seed=0)",
                            "attention_decode(B=1,n_h=4,n_kv=1,d=128,page=64,split=8,ctx=32768,regime=few_dominant,dtype=bf16,seed=0)",
                            "attention_decode(B=2,n_h=4,n_kv=2,d=192,dv=128,page=16,split=2,ctx=100,lens=100/37,regime=typical,dtype=f32,seed=0)",
                            "attention_decode(B=2,n_h=2,n_kv=1,d=32,page=8,split=1,ctx=50,regime=typical,dtype=f64,seed=0)",
                            "attention_decode(B=2,n_h=8,n_kv=2,d=128,page=16,split=3,ctx=500,kv=fp8,k_scale=0.037,v_scale=0.021,regime=typical,dtype=bf16,seed=0)",
                        },
                        "dd"});
DG_REGISTER_SUITE(attention_decode_gate,
                  Suite{"attention-decode-gate", "the attention_decode merge gate: GQA groups 2-12 and MQA, ragged and "
                        "empty contexts, empty splits, large logits, near-uniform scores, 32K with a few dominant keys, "
                        "dv != d, every dtype, FP8 pages with per-tensor scales; dd reference",
                        {
                            "attention_decode(B=4,n_h=8,n_kv=2,d=128,page=16,split=1,ctx=300,regime=typical,dtype=bf16,seed=0)",
                            "attention_decode(B=2,n_h=24,n_kv=2,d=128,page=16,split=5,ctx=1000,regime=typical,dtype=bf16,seed=0)",
                            "attention_decode(B=3,n_h=12,n_kv=1,d=128,page=16,split=7,ctx=600,regime=typical,dtype=bf16,seed=0)",
                            "attention_decode(B=5,n_h=8,n_kv=2,d=128,page=16,split=4,ctx=700,regime=ragged,dtype=bf16,seed=0)",
                            "attention_decode(B=4,n_h=4,n_kv=2,d=64,page=16,split=8,ctx=64,regime=empty_splits,dtype=bf16,seed=0)",
                            "attention_decode(B=2,n_h=8,n_kv=2,d=128,page=16,split=3,ctx=500,regime=large_logits,dtype=bf16,seed=0)",
                            "attention_decode(B=2,n_h=8,n_kv=2,d=128,page=1,split=4,ctx=2000,regime=near_uniform,dtype=bf16,seed=0)",
                            "attention_decode(B=1,n_h=4,n_kv=1,d=128,page=64,split=16,ctx=32768,regime=few_dominant,dtype=bf16,seed=0)",
                            "attention_decode(B=2,n_h=4,n_kv=2,d=192,dv=128,page=16,split=2,ctx=100,lens=100/37,regime=typical,dtype=f32,seed=0)",
                            "attention_decode(B=2,n_h=4,n_kv=4,d=128,page=64,split=2,ctx=1000,regime=few_dominant,dtype=f16,seed=0)",
                            "attention_decode(B=2,n_h=2,n_kv=1,d=32,page=8,split=1,ctx=50,regime=typical,dtype=f64,seed=0)",
                            "attention_decode(B=3,n_h=8,n_kv=2,d=128,page=16,split=4,ctx=700,kv=fp8,k_scale=0.037,v_scale=0.021,regime=ragged,dtype=bf16,seed=0)",
                            "attention_decode(B=1,n_h=8,n_kv=1,d=128,page=64,split=8,ctx=4096,kv=fp8,k_scale=0.05,v_scale=0.013,regime=few_dominant,dtype=bf16,seed=0)",
                        },
                        "dd"});

// attention-decode-gpu: what scripts/gpu-check.sh benches: GLM-4.5's attention on one rank of TP 8
// (12 q heads over 1 kv head of 128), vLLM's page 16, bf16, at B = 1, 8, 64 sequences of 32K, 8K and
// 4K context, split so that every sequence's share is 512 to 1024 tokens and the grid has 64 to 256
// blocks; and FP8 pages at B = 8. f64 reference (every candidate's softmax is f32).
DG_REGISTER_SUITE(attention_decode_gpu,
                  Suite{"attention-decode-gpu", "paged decode attention at GLM-4.5's TP-8 shape (12 q heads, 1 kv "
                        "head of 128, page 16) at B = 1, 8, 64 and 32K, 8K, 4K context, bf16 and FP8 pages (f64 reference)",
                        {
                            "attention_decode(B=1,n_h=12,n_kv=1,d=128,page=16,split=64,ctx=32768,regime=typical,dtype=bf16,seed=0)",
                            "attention_decode(B=8,n_h=12,n_kv=1,d=128,page=16,split=16,ctx=8192,regime=typical,dtype=bf16,seed=0)",
                            "attention_decode(B=64,n_h=12,n_kv=1,d=128,page=16,split=4,ctx=4096,regime=typical,dtype=bf16,seed=0)",
                            "attention_decode(B=8,n_h=12,n_kv=1,d=128,page=16,split=16,ctx=8192,kv=fp8,k_scale=0.037,v_scale=0.021,regime=typical,dtype=bf16,seed=0)",
                        },
                        "f64"});

// attention-long: decode attention at the production context, 128K to 1M tokens, on ragged batches
// (a 1M sequence beside a 300K one, an empty one and a 17-token one, whose splits are mostly empty)
// in bf16 and FP8 pages, with a few dominant keys (the last token one of them) at 512K and 1M,
// near-uniform scores at 128K (o a cancelling mean of ~128K values: with pages of 1 the naive's
// per-page partials are one sequential f32 sum, which loses ~1 bit a doubling of L and falls under
// the 12-bit verify floor from 512K on, so a longer near-uniform case at page 1 cannot be judged
// against the naive base; with pages of 16 and 64 the naive keeps 16.6-23.0 bits of o on the other
// cases, 18.8 at 1M) and large logits (the split merge's max subtraction at L = 128K), split counts
// 4-32, pages of 1, 16 and 64. One kv head of 64 channels (MQA) at 1M, two (GQA: the kv-head mapping
// shows) at 512K and 128K: the 1M case's pages are 345 MB in bf16 and the reference's f64 copy
// 1.4 GB. f64 reference (Dot2 scores). README has its run times, the reference's tokens/s and the
// peak memory.
DG_REGISTER_SUITE(attention_long,
                  Suite{"attention-long", "attention_decode at 128K-1M context: ragged batches (1M, 300K, 0, 17), bf16 and "
                        "FP8 pages, a few dominant keys, near-uniform scores, large logits, splits 4-32; f64 reference",
                        {
                            "attention_decode(B=4,n_h=2,n_kv=1,d=64,page=16,split=16,ctx=1048576,lens=1048576/300000/0/17,regime=few_dominant,dtype=bf16,seed=0)",
                            "attention_decode(B=2,n_h=4,n_kv=2,d=64,page=64,split=32,ctx=524288,lens=524288/1,kv=fp8,k_scale=0.037,v_scale=0.021,regime=few_dominant,dtype=bf16,seed=0)",
                            "attention_decode(B=4,n_h=4,n_kv=2,d=64,page=64,split=8,ctx=131072,lens=131072/40000/0/17,kv=fp8,k_scale=0.05,v_scale=0.013,regime=near_uniform,dtype=bf16,seed=0)",
                            "attention_decode(B=3,n_h=4,n_kv=2,d=64,page=1,split=5,ctx=131072,lens=131072/0/65539,regime=near_uniform,dtype=bf16,seed=0)",
                            "attention_decode(B=2,n_h=8,n_kv=2,d=128,page=16,split=4,ctx=131072,lens=131072/65539,regime=large_logits,dtype=bf16,seed=0)",
                        },
                        "f64"});

}  // namespace
}  // namespace dg
