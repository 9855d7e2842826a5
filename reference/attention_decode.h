// Reference of attention_decode: paged GQA decode attention, one query token per sequence
// (notes/model-ops.md sections 3 and 5). Written once over a scalar Real and run in the tiers of
// reference/real/tier.h.
//
// Shapes: q [B,n_h,d]; a pool of KV pages k_cache [n_pages,P,n_kv,d], v_cache [n_pages,P,n_kv,dv]
// (vLLM's flash layout: page, slot, kv head, channel); page_table [B,max_pages] i32 (the pool page of
// each logical page of a sequence; pages in any order, one pool for the batch); seqlens [B] i32.
// Token j < seqlens[b] of sequence b lives in page page_table[b][j / P], slot j % P. Query head h
// reads kv head h / (n_h / n_kv) (GQA: consecutive q heads share a kv head). Pages stored as FP8
// e4m3 hold k / k_scale and v / v_scale (vLLM's per-tensor scales, f32): the key and value are
// k_scale * k_stored and v_scale * v_stored, exact in a double (1 otherwise). Per (b, h), with
// scale as the kernels hold it (softmax_scale: an f32, default fl32(d^-0.5)):
//   s_j = scale * sum_i q[b][h][i] k_j[i]                     j in [0, L), L = seqlens[b]
//   m   = max_j s_j                                           pass 1, increasing j
//   l   = sum_j exp(s_j - m),  u[c] = sum_j exp(s_j - m) v_j[c]   pass 2, increasing j (one loop)
//   o[c] = u[c] / l,  lse = m + ln l                          (natural log)
// Both passes recompute s_j (sum over i in increasing order), so memory stays O(d + dv) per head
// beyond the inputs (no score row of the context's length). The f64 tier sums q.k by Dot2
// (reference/real/f64.h). Empty context (L = 0): o = 0 and lse = -inf, by definition; a candidate
// must write exactly that (NaN there is a missing -inf guard). Outputs are doubles rounded to odd,
// with optional two-double tails for certification.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/tensor.h"
#include "reference/real/tier.h"

namespace dg {

struct AttentionDecodeParams {
  int64_t B = 1, n_h = 1, n_kv = 1, d = 128, dv = 128, page = 16, max_pages = 1, n_pages = 1;
  float scale = 0.0f;   // softmax scale as an f32 (attention_decode_params: fl32(d^-0.5) by default)
  float k_scale = 1.0f, v_scale = 1.0f;   // per-tensor dequant scales of FP8 pages (1 otherwise)
};
struct AttentionDecodeReferenceResult {
  std::vector<double> o, o_tail;       // [B,n_h,dv]; tails: 2 per element
  std::vector<double> lse, lse_tail;   // [B,n_h]
};

// The reference over the first `rows` (b, h) pairs in row-major order (rows < 0: all B*n_h): o has
// rows*dv elements, lse rows. Throws InputError on non-finite q/k/v, a mis-shaped tensor, n_h not a
// multiple of n_kv, a negative length or one past max_pages*page, or a used page-table entry outside
// [0, n_pages).
AttentionDecodeReferenceResult attention_decode_reference(Tier tier, const AttentionDecodeParams& p, const Tensor& q,
                                                          const Tensor& k_cache, const Tensor& v_cache,
                                                          const Tensor& page_table, const Tensor& seqlens,
                                                          bool tails = false, int64_t rows = -1);

// The page-table and length checks of the reference, shared with the OpSpec's input check: every
// length in [0, max_pages*page] and every page-table entry a sequence uses (its first
// ceil(L / page)) in [0, n_pages); the entries past them are not read. Throws InputError naming the
// op, the sequence, the entry and the value.
void check_attention_decode_pages(const AttentionDecodeParams& p, const std::vector<int64_t>& lens,
                                  const std::vector<int64_t>& table, const char* op = "attention_decode");

}  // namespace dg
