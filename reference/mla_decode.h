// Reference of mla_decode: MLA decode attention in the absorbed form (notes/model-ops.md section
// 1.3), dense over a sequence's pages or sparse over given token indices. Written once over a
// scalar Real and run in the tiers of reference/real/tier.h; the softmax row is attention_decode's
// (reference/decode_softmax.h), with one KV head whose key is the whole latent row and whose value
// is its first d_c channels.
//
// Shapes: q [B,n_h,d_c] (q~_h = W_UK,h^T q_nope,h), q_pe [B,n_h,rope] (rope 64, or 0 and absent:
// GLM-5.3-Flash's NoPE geometry); a pool of latent pages latent [n_pages,P,d_c+rope] (per token
// [c_kv | k_pe], FlashMLA's 576 layout, or c_kv alone), page_table [B,max_pages] i32, seqlens [B]
// i32; sparse (topk > 0): indices [B,topk] i32. Token j lives in page page_table[b][j / P], slot
// j % P. FP8 e4m3 pages hold latent / kv_scale (one per-tensor f32 scale; the latent is kv_scale *
// the stored value, exact in a double). Per (b, h), with the configured f32 scale ((d_nope +
// d_rope)^-0.5 of the expanded head: 1/16 for GLM-5.x and GLM-5.3-Flash, not d_c^-0.5):
//   keys  dense: tokens j = 0 .. L-1 (L = seqlens[b]); sparse: the entries t = 0 .. topk-1 of
//         indices[b] in order, an entry x a key when 0 <= x < L; -1 (the indexer's invalid) and
//         x in [L, max_pages*P) are not attended; a duplicated index is a key each time it
//         appears (the kernels read every slot of the index list; they do not deduplicate)
//   s_t   = scale * (q~ . c_kv,t + q_pe . k_pe,t)
//   o~[c] = sum_t softmax(s)_t c_kv,t[c]  (c < d_c),  lse = m + ln sum_t exp(s_t - m)  (natural)
// with attention_decode's two passes (increasing t). No key (L = 0, or no valid index): o~ = 0 and
// lse = -inf. The model's o_h = W_UV,h o~_h is a GEMM, judged by the gemm op. Outputs are doubles
// rounded to odd, with optional two-double tails for certification.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/tensor.h"
#include "reference/attention_decode.h"
#include "reference/real/tier.h"

namespace dg {

struct MlaDecodeParams {
  int64_t B = 1, n_h = 1, d_c = 512, rope = 0, page = 64, max_pages = 1, n_pages = 1;
  int64_t topk = 0;          // 0: dense; > 0: sparse over indices [B,topk]
  float scale = 0.0625f;     // the configured softmax scale (f32)
  float kv_scale = 1.0f;     // FP8 latent pages' per-tensor dequant scale (1 otherwise)
  int64_t width() const { return d_c + rope; }
  // The same attention as attention_decode sees it: one kv head, d = d_c + rope, dv = d_c.
  AttentionDecodeParams attention() const;
};

// The keys of sequence b in order (mla_decode.h): tokens 0 .. L-1, or the valid entries of its
// index row.
std::vector<int64_t> mla_decode_keys(const MlaDecodeParams& p, int64_t b, const std::vector<int64_t>& lens,
                                     const std::vector<int64_t>& indices);

// Every index in [-1, max_pages*page); throws InputError naming the entry otherwise.
void check_mla_decode_indices(const MlaDecodeParams& p, const std::vector<int64_t>& indices);

// The reference over the first `rows` (b, h) pairs (rows < 0: all B*n_h): o [rows*d_c], lse [rows].
// `indices` is read only when p.topk > 0, q_pe only when p.rope > 0. Throws InputError on
// non-finite inputs, a mis-shaped tensor, a bad length, page-table entry or index.
AttentionDecodeReferenceResult mla_decode_reference(Tier tier, const MlaDecodeParams& p, const Tensor& q, const Tensor& q_pe,
                                                    const Tensor& latent, const Tensor& page_table, const Tensor& seqlens,
                                                    const Tensor& indices, bool tails = false, int64_t rows = -1);

}  // namespace dg
