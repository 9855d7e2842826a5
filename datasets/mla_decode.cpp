// Input regimes and suites of mla_decode (reference/mla_decode.h; notes/model-ops.md sections 1.3,
// 3 and 5). The pool is laid out as attention_decode's (datasets/decode_inputs.h: every sequence's
// pages scattered through the pool in an order drawn from the seed, one spare page, page-table
// entries past a sequence's pages 0), with one KV head whose key is the latent row [c_kv | k_pe]:
// q~, q_pe and every latent value are drawn N(0,1) and rounded to the dtype, and the shaped regimes
// move whole latent rows (so c_kv, the value, moves with its key). Sparse cases (topk > 0) draw the
// index row of each sequence as the first min(L, topk) positions of a random permutation of its L
// tokens (the indexer's order is its scores', not the positions'), then -1.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "datasets/decode_inputs.h"
#include "datasets/dists.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/attention_decode.h"
#include "harness/ops/mla_decode.h"

namespace dg {
namespace {

using decode_inputs::Layout;
using decode_inputs::Shape;
using decode_inputs::stored;

// The index rows [B, topk]. sparse_mixed then changes entry t of a row, by a uniform draw u: u <
// 1/8 gives -1; u < 3/16 a position in [L, max_pages*page) (past the length: not attended) when the
// sequence's pages leave one; u < 1/4 (t > 0) a copy of entry t - 1 (a duplicate, attended twice).
std::vector<double> indices(const Case& c, const MlaDecodeParams& p, const std::vector<int64_t>& lens) {
  const int64_t cap = p.max_pages * p.page;
  std::vector<double> idx(static_cast<size_t>(p.B * p.topk), -1.0), u(static_cast<size_t>(cap + 2 * p.topk));
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t L = lens[static_cast<size_t>(b)];
    TensorRng(c.seed(), c.str(), "indices").uniform(b * static_cast<int64_t>(u.size()), u);
    std::vector<int64_t> perm(static_cast<size_t>(L));
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = L - 1; i > 0; --i)
      std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(std::min<int64_t>(i, static_cast<int64_t>(u[static_cast<size_t>(i)] * static_cast<double>(i + 1))))]);
    double* row = idx.data() + b * p.topk;
    for (int64_t t = 0; t < std::min(L, p.topk); ++t) row[t] = static_cast<double>(perm[static_cast<size_t>(t)]);
    if (c.text("regime") != "sparse_mixed") continue;
    for (int64_t t = 0; t < p.topk; ++t) {
      const double a = u[static_cast<size_t>(cap + 2 * t)], f = u[static_cast<size_t>(cap + 2 * t + 1)];
      if (a < 1.0 / 8) row[t] = -1;
      else if (a < 3.0 / 16 && cap > L) row[t] = static_cast<double>(L + std::min(cap - L - 1, static_cast<int64_t>(f * static_cast<double>(cap - L))));
      else if (a < 1.0 / 4 && t > 0) row[t] = row[t - 1];
    }
  }
  return idx;
}

void generate(const Case& c, TensorMap& in, Shape shape) {
  const MlaDecodeParams mp = mla_decode_params(c);
  const Layout l = decode_inputs::layout(c, mp.attention());
  const AttentionDecodeParams& p = l.p;   // n_kv 1, d = d_c + rope
  const int64_t rows = p.B * p.n_h, D = mp.width();
  std::vector<double> q(static_cast<size_t>(rows * D)), latent(static_cast<size_t>(p.n_pages * p.page * D));
  TensorRng(c.seed(), c.str(), "q").normal(0, q);
  TensorRng(c.seed(), c.str(), "latent").normal(0, latent);
  for (double& x : q) x = round_to(c.dtype(), shape == Shape::near_uniform ? 0.01 * x : x);
  if (shape == Shape::few_dominant || shape == Shape::large_logits) decode_inputs::shape_keys(c, shape, l, q, latent);
  std::vector<double> nope(static_cast<size_t>(rows * mp.d_c)), pe(static_cast<size_t>(rows * mp.rope));
  for (int64_t i = 0; i < rows; ++i) {
    std::copy_n(q.begin() + i * D, mp.d_c, nope.begin() + i * mp.d_c);
    std::copy_n(q.begin() + i * D + mp.d_c, mp.rope, pe.begin() + i * mp.rope);
  }
  in["q"] = stored(c.dtype(), {p.B, p.n_h, mp.d_c}, nope);
  if (mp.rope > 0) in["q_pe"] = stored(c.dtype(), {p.B, p.n_h, mp.rope}, pe);
  for (double& x : latent) x /= mp.kv_scale;   // FP8 pages hold latent / kv_scale (saturating at +-448)
  in["latent"] = stored(c.text("kv") == "fp8" ? DType::e4m3 : c.dtype(), {p.n_pages, p.page, D}, latent);
  in["page_table"] = stored(DType::i32, {p.B, p.max_pages}, l.table);
  in["seqlens"] = stored(DType::i32, {p.B}, std::vector<double>(l.lens.begin(), l.lens.end()));
  if (mp.topk > 0) in["indices"] = stored(DType::i32, {p.B, mp.topk}, indices(c, mp, l.lens));
}

struct RegisterMlaDecodeRegimes {
  RegisterMlaDecodeRegimes() {
    const auto add = [](const char* name, const char* doc, Shape shape) {
      register_regime({name, "mla_decode", doc, {}, [shape](const Case& c, TensorMap& in) { generate(c, in, shape); }});
    };
    add("typical", "q~, q_pe and the latent ~ N(0,1): scores N(0, (d_c + rope) scale^2), std 1.4 at 512 and 1/16",
        Shape::typical);
    add("few_dominant", "typical, except three latent rows per sequence (one the last token) aligned with the mean query "
        "to a score of 14: at long context a few keys hold most of the weight", Shape::few_dominant);
    add("near_uniform", "q ~ N(0, 0.01^2): scores nearly equal, o~ ~ the mean of c_kv (a cancelling sum)", Shape::near_uniform);
    add("large_logits", "every latent row aligned with the mean query to scores near +100 (even sequences) or -100 (odd): "
        "exp(s) overflows (or underflows) f32 without the max subtraction", Shape::large_logits);
    add("ragged", "typical inputs; without lens=, lengths cycle over ctx, 0, 1, ctx/2 + 3, page + 1", Shape::typical);
    add("empty_splits", "typical inputs; without lens=, lengths cycle over 0, 1, page - 1, page + 1: with split > 1 splits "
        "get no keys", Shape::typical);
    add("sparse_mixed", "typical inputs with ragged lengths (lens= aside); the index rows (topk > 0) get -1 entries, "
        "positions past the length (not attended) and duplicates (attended twice), about 1/8, 1/16 and 1/16 of them",
        Shape::typical);
  }
};
const RegisterMlaDecodeRegimes register_mla_decode_regimes;

// Suites. Geometries from the configs (notes/model-ops.md section 2): d_c 512 with no rope (GLM-5.3-
// Flash's NoPE layers) and with 64 rope dims (the 576 layout of GLM-5.x and Kimi-Linear), scale 1/16
// (Kimi's 192^-0.5 once); fewer than 64 heads per case (a head's math does not depend on the
// others); FlashMLA's page 64 and SGLang's 1; split counts 1 to 16 with empty splits; sparse at
// topk 2048 and 2051 (the k-pool's ragged tail) with -1, out-of-length and duplicated entries; FP8
// latent pages with a per-tensor scale; one 32K context with a few dominant keys. dd reference.
#define MLA(args) "mla_decode(" args ")"
DG_REGISTER_SUITE(mla_decode_smoke,
                  Suite{"mla-decode-smoke", "small mla_decode cases: NoPE and 576 geometries, dense and sparse (with "
                        "invalid entries), every regime and dtype, FP8 latent, pages of 1 and 64, no split, several and "
                        "empty ones, ragged lengths with 0 and 1, one 32K context (seconds)",
                        {
                            MLA("B=2,n_h=16,d_c=512,rope=0,page=64,split=1,ctx=300,regime=typical,dtype=bf16,seed=0"),
                            MLA("B=2,n_h=8,d_c=512,rope=64,page=64,split=3,ctx=300,regime=typical,dtype=bf16,seed=0"),
                            MLA("B=5,n_h=4,d_c=512,rope=64,page=64,split=3,ctx=200,regime=ragged,dtype=bf16,seed=0"),
                            MLA("B=4,n_h=4,d_c=512,rope=0,page=64,split=4,ctx=200,regime=empty_splits,dtype=bf16,seed=0"),
                            MLA("B=2,n_h=8,d_c=512,rope=64,page=64,split=2,ctx=256,regime=large_logits,dtype=bf16,seed=0"),
                            MLA("B=2,n_h=4,d_c=512,rope=0,page=1,split=4,ctx=500,regime=near_uniform,dtype=f16,seed=0"),
                            MLA("B=2,n_h=8,d_c=512,rope=64,page=64,split=2,ctx=300,topk=64,regime=typical,dtype=bf16,seed=0"),
                            MLA("B=5,n_h=4,d_c=512,rope=0,page=64,split=3,ctx=300,topk=128,regime=sparse_mixed,dtype=bf16,seed=0"),
                            MLA("B=1,n_h=4,d_c=512,rope=64,page=64,split=2,ctx=2100,topk=2051,regime=sparse_mixed,dtype=bf16,seed=0"),
                            MLA("B=2,n_h=8,d_c=512,rope=64,page=64,split=3,ctx=300,kv=fp8,kv_scale=0.037,regime=typical,dtype=bf16,seed=0"),
                            MLA("B=2,n_h=4,d_c=512,rope=64,page=64,split=2,ctx=100,lens=100/37,scale=0.0721687836,regime=typical,dtype=f32,seed=0"),
                            MLA("B=2,n_h=2,d_c=32,rope=8,page=8,split=1,ctx=50,regime=typical,dtype=f64,seed=0"),
                            MLA("B=1,n_h=1,d_c=512,rope=0,page=64,split=8,ctx=32768,regime=few_dominant,dtype=bf16,seed=0"),
                        },
                        "dd"});
DG_REGISTER_SUITE(mla_decode_gate,
                  Suite{"mla-decode-gate", "the mla_decode merge gate: NoPE and 576 geometries, dense and sparse at topk "
                        "2048 and 2051 with -1, out-of-length and duplicated indices, ragged and empty contexts, empty "
                        "splits, large logits, near-uniform scores, 32K with a few dominant keys, every dtype, FP8 latent "
                        "pages; dd reference",
                        {
                            MLA("B=4,n_h=16,d_c=512,rope=0,page=64,split=1,ctx=300,regime=typical,dtype=bf16,seed=0"),
                            MLA("B=2,n_h=8,d_c=512,rope=64,page=64,split=5,ctx=700,regime=typical,dtype=bf16,seed=0"),
                            MLA("B=5,n_h=8,d_c=512,rope=64,page=64,split=4,ctx=700,regime=ragged,dtype=bf16,seed=0"),
                            MLA("B=4,n_h=4,d_c=512,rope=0,page=64,split=8,ctx=200,regime=empty_splits,dtype=bf16,seed=0"),
                            MLA("B=2,n_h=8,d_c=512,rope=64,page=64,split=3,ctx=500,regime=large_logits,dtype=bf16,seed=0"),
                            MLA("B=2,n_h=4,d_c=512,rope=0,page=1,split=4,ctx=2000,regime=near_uniform,dtype=bf16,seed=0"),
                            MLA("B=1,n_h=1,d_c=512,rope=0,page=64,split=16,ctx=32768,regime=few_dominant,dtype=bf16,seed=0"),
                            MLA("B=2,n_h=4,d_c=512,rope=64,page=64,split=2,ctx=1000,regime=few_dominant,dtype=f16,seed=0"),
                            MLA("B=2,n_h=4,d_c=512,rope=64,page=64,split=2,ctx=100,lens=100/37,scale=0.0721687836,regime=typical,dtype=f32,seed=0"),
                            MLA("B=2,n_h=2,d_c=32,rope=8,page=8,split=1,ctx=50,regime=typical,dtype=f64,seed=0"),
                            MLA("B=3,n_h=8,d_c=512,rope=64,page=64,split=4,ctx=700,kv=fp8,kv_scale=0.037,regime=ragged,dtype=bf16,seed=0"),
                            MLA("B=2,n_h=4,d_c=512,rope=0,page=64,split=4,ctx=4000,topk=2048,regime=typical,dtype=bf16,seed=0"),
                            MLA("B=5,n_h=2,d_c=512,rope=64,page=64,split=3,ctx=3000,topk=2051,regime=sparse_mixed,dtype=bf16,seed=0"),
                            MLA("B=5,n_h=8,d_c=512,rope=0,page=1,split=2,ctx=300,topk=100,regime=sparse_mixed,dtype=bf16,seed=0"),
                            MLA("B=2,n_h=8,d_c=512,rope=64,page=64,split=2,ctx=500,topk=256,regime=large_logits,dtype=bf16,seed=0"),
                        },
                        "dd"});
// mla-decode-gpu: what scripts/gpu-check.sh benches: DeepSeek-V3's MLA on one rank of TP 8 (16 q
// heads over the 576 latent), FlashMLA's page 64, bf16, dense at B = 1, 8, 32 sequences of 32K,
// 8K and 4K context, split so that every sequence's share is 1K to 2K tokens; FP8 pages at B = 8;
// sparse top-2048 (DSA) at B = 8 over 16K. f64 reference (every candidate's softmax is f32).
DG_REGISTER_SUITE(mla_decode_gpu,
                  Suite{"mla-decode-gpu", "absorbed MLA decode at DeepSeek-V3's TP-8 shape (16 q heads, the 576 latent, "
                        "page 64): dense at B = 1, 8, 32 and 32K, 8K, 4K context, FP8 pages at B = 8, sparse top-2048 at "
                        "B = 8 over 16K (f64 reference)",
                        {
                            MLA("B=1,n_h=16,d_c=512,rope=64,page=64,split=32,ctx=32768,regime=typical,dtype=bf16,seed=0"),
                            MLA("B=8,n_h=16,d_c=512,rope=64,page=64,split=8,ctx=8192,regime=typical,dtype=bf16,seed=0"),
                            MLA("B=32,n_h=16,d_c=512,rope=64,page=64,split=2,ctx=4096,regime=typical,dtype=bf16,seed=0"),
                            MLA("B=8,n_h=16,d_c=512,rope=64,page=64,split=8,ctx=8192,kv=fp8,kv_scale=0.037,regime=typical,dtype=bf16,seed=0"),
                            MLA("B=8,n_h=16,d_c=512,rope=64,page=64,split=2,ctx=16384,topk=2048,regime=typical,dtype=bf16,seed=0"),
                        },
                        "f64"});
#undef MLA

}  // namespace
}  // namespace dg
