// What the CPU candidates and mutants of attention_decode (candidates/cpu/attention_decode.cpp,
// candidates/mutants/attention_decode.cpp) share: the case's view of its inputs, the gather of one
// kv head's keys and values of a sequence out of the pool through the page table (read as f32,
// exact for bf16/f16/f32 storage), and the stores of one (b, h) row's o and lse.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/ops/attention_decode.h"

namespace dg::attention_cpu {

struct View {
  AttentionDecodeParams p;
  std::vector<int64_t> lens, table;   // the stored seqlens and page table
  const Tensor *q, *k, *v;
  int64_t group() const { return p.n_h / p.n_kv; }
};

inline View view(const Case& c, const TensorMap& in) {
  return {attention_decode_params(c), attention_decode_ints(need(in, "seqlens", "attention_decode")),
          attention_decode_ints(need(in, "page_table", "attention_decode")), &need(in, "q", "attention_decode"),
          &need(in, "k_cache", "attention_decode"), &need(in, "v_cache", "attention_decode")};
}

// Rows j < n of kv head g of sequence b: k [n,d], v [n,dv], in token order; FP8 pages dequantized
// in f32 (k_scale * k, v_scale * v, one rounding each; scales of 1 leave the values as stored).
inline void gather(const View& w, int64_t b, int64_t g, int64_t n, std::vector<float>& k, std::vector<float>& v) {
  const AttentionDecodeParams& p = w.p;
  k.resize(static_cast<size_t>(n * p.d));
  v.resize(static_cast<size_t>(n * p.dv));
  for (int64_t j = 0; j < n; ++j) {
    const int64_t slot = w.table[static_cast<size_t>(b * p.max_pages + j / p.page)] * p.page + j % p.page;
    load_row(*w.k, (slot * p.n_kv + g) * p.d, p.d, k.data() + j * p.d);
    load_row(*w.v, (slot * p.n_kv + g) * p.dv, p.dv, v.data() + j * p.dv);
  }
  for (float& x : k) x = x * p.k_scale;
  for (float& x : v) x = x * p.v_scale;
}

inline std::vector<float> query(const View& w, int64_t b, int64_t h) {
  std::vector<float> q(static_cast<size_t>(w.p.d));
  load_row(*w.q, (b * w.p.n_h + h) * w.p.d, w.p.d, q.data());
  return q;
}

// o [dv] and lse of row (b, h), each rounded once into its tensor's dtype.
inline void store(TensorMap& out, const View& w, int64_t b, int64_t h, const std::vector<float>& o, float lse) {
  const int64_t rows = w.p.B * w.p.n_h, i = b * w.p.n_h + h;
  store_row(need_out(out, "o", rows * w.p.dv, "attention_decode"), i * w.p.dv, w.p.dv, o.data());
  store_row(need_out(out, "lse", rows, "attention_decode"), i, 1, &lse);
}

// The rows of the two CPU candidates (candidates/cpu/attention_decode.cpp has their definitions),
// over one head's gathered keys k [L, p.d] and values v [L, p.dv] (mla_decode's candidates call them
// with the latent's keys and values).
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc = acc + a[i] * b[i];
  return acc;
}

// One page's fresh f32 partial: p_j = exp(s[j - t0] - m) for the keys [t0, t1), l_t = sum p_j and
// part[c] = sum p_j v_j[c], each summed in increasing j from t0 (part is cleared first).
inline void page_partial(const float* s, float m, int64_t t0, int64_t t1, const std::vector<float>& v, int64_t dv, float& lt,
                         std::vector<float>& part) {
  lt = 0.0f;
  std::fill(part.begin(), part.end(), 0.0f);
  for (int64_t j = t0; j < t1; ++j) {
    const float e = std::exp(s[j - t0] - m);
    lt = lt + e;
    for (int64_t c = 0; c < dv; ++c) part[static_cast<size_t>(c)] = part[static_cast<size_t>(c)] + e * v[static_cast<size_t>(j * dv + c)];
  }
}

// The naive, summed as a plain paged kernel sums: two passes, no online rescaling, no split. Pass 1:
// m = max s_j in increasing j. Pass 2, page by page of p.page keys (keys [P page, (P+1) page) of k
// and v, in their order; the last page may be short): p_j = exp(s_j - m), and one f32 partial per
// page, l_P = sum p_j and acc_P[c] = sum p_j v_j[c], each summed in increasing j from 0; then
// l = sum l_P and acc[c] = sum acc_P[c] in increasing P from 0. o = acc / l, lse = m + ln l (no key:
// o = 0, lse = -inf). page = 1 is one sequential sum over the keys.
inline void naive_row(const AttentionDecodeParams& p, const std::vector<float>& q, int64_t L, const std::vector<float>& k,
                      const std::vector<float>& v, std::vector<float>& o, float& lse) {
  const int64_t d = p.d, dv = p.dv;
  std::vector<float> s(static_cast<size_t>(L));
  float m = kNegInf;
  for (int64_t j = 0; j < L; ++j) m = std::max(m, s[static_cast<size_t>(j)] = dot(q.data(), k.data() + j * d, d) * p.scale);
  std::vector<float> acc(static_cast<size_t>(dv), 0.0f), part(static_cast<size_t>(dv));
  float l = 0.0f;
  for (int64_t j0 = 0; j0 < L; j0 += p.page) {
    float lp = 0.0f;
    page_partial(s.data() + j0, m, j0, std::min(L, j0 + p.page), v, dv, lp, part);
    l = l + lp;
    for (int64_t c = 0; c < dv; ++c) acc[static_cast<size_t>(c)] = acc[static_cast<size_t>(c)] + part[static_cast<size_t>(c)];
  }
  for (int64_t c = 0; c < dv; ++c) o[static_cast<size_t>(c)] = L ? acc[static_cast<size_t>(c)] / l : 0.0f;
  lse = L ? m + std::log(l) : kNegInf;
}

// The LSE merge of `split` split states (o_p [split, dv] normalised, lse_p, M their max): w_p =
// exp(lse_p - M), o = sum w_p o_p / sum w_p, lse = M + ln sum w_p; M = -inf (no keys): o = 0,
// lse = -inf.
inline void merge(int64_t split, int64_t dv, const std::vector<float>& os, const std::vector<float>& ls, float M,
                  std::vector<float>& o, float& lse) {
  std::fill(o.begin(), o.end(), 0.0f);
  if (M == kNegInf) {   // no keys at all
    lse = kNegInf;
    return;
  }
  float wsum = 0.0f;
  for (int64_t s = 0; s < split; ++s) {
    const float ws = std::exp(ls[static_cast<size_t>(s)] - M);
    wsum = wsum + ws;
    for (int64_t c = 0; c < dv; ++c) o[static_cast<size_t>(c)] = o[static_cast<size_t>(c)] + ws * os[static_cast<size_t>(s * dv + c)];
  }
  for (float& x : o) x = x / wsum;
  lse = M + std::log(wsum);
}

// One tile of a split, keys [t0, t1) (one KV page): s_j = fl32(q.k_j) * scale, the tile's max,
// m_new = max(m, tile max), alpha = exp(m - m_new) (0 on the first tile: m = -inf), p_j =
// exp(s_j - m_new), a fresh f32 partial l_t = sum p_j and acc_t[c] = sum p_j v_j[c] in increasing j
// from t0, then l = l alpha + l_t, acc[c] = acc[c] alpha + acc_t[c], m = m_new.
inline void split_tile(const AttentionDecodeParams& p, const std::vector<float>& q, int64_t t0, int64_t t1,
                       const std::vector<float>& k, const std::vector<float>& v, float& m, float& l, std::vector<float>& acc) {
  const int64_t d = p.d, dv = p.dv;
  std::vector<float> s(static_cast<size_t>(t1 - t0)), part(static_cast<size_t>(dv));
  float mt = kNegInf, lt = 0.0f;
  for (int64_t j = t0; j < t1; ++j) mt = std::max(mt, s[static_cast<size_t>(j - t0)] = dot(q.data(), k.data() + j * d, d) * p.scale);
  const float m_new = std::max(m, mt), alpha = std::exp(m - m_new);
  page_partial(s.data(), m_new, t0, t1, v, dv, lt, part);
  l = l * alpha + lt;
  for (int64_t c = 0; c < dv; ++c) acc[static_cast<size_t>(c)] = acc[static_cast<size_t>(c)] * alpha + part[static_cast<size_t>(c)];
  m = m_new;
}

// One split's online softmax over tokens [j0, j1) (j0 on a page boundary), production's form
// (FlashDecoding, vLLM PagedAttention v2, FlashInfer): the keys in tiles of one KV page, [j0, j0 +
// page), [j0 + page, j0 + 2 page), ... (the last may be short), each through split_tile in
// increasing order from f32 m = -inf, l = 0, acc = 0; o_p = acc / l (normalised) and lse_p =
// m + ln l. A split with no keys gives o_p = 0 and lse_p = -inf (the -inf guard: its m - m would be
// NaN). page = 1 is the token-wise online softmax.
inline void split_state(const AttentionDecodeParams& p, const std::vector<float>& q, int64_t j0, int64_t j1,
                        const std::vector<float>& k, const std::vector<float>& v, float* o, float& lse) {
  float m = kNegInf, l = 0.0f;
  std::vector<float> acc(static_cast<size_t>(p.dv), 0.0f);
  for (int64_t t0 = j0; t0 < j1; t0 += p.page) split_tile(p, q, t0, std::min(j1, t0 + p.page), k, v, m, l, acc);
  for (int64_t c = 0; c < p.dv; ++c) o[c] = j1 > j0 ? acc[static_cast<size_t>(c)] / l : 0.0f;   // the -inf guard
  lse = j1 > j0 ? m + std::log(l) : kNegInf;
}

// Flash-decoding: the L keys split by pages (attention_decode_pages_per_split), one online softmax
// per split, then the merge.
inline void splitkv_row(const AttentionDecodeParams& p, int64_t split, const std::vector<float>& q, int64_t L,
                        const std::vector<float>& k, const std::vector<float>& v, std::vector<float>& o, float& lse) {
  const int64_t dv = p.dv, pages = (L + p.page - 1) / p.page;
  const int64_t span = attention_decode_pages_per_split(pages, split) * p.page;
  std::vector<float> os(static_cast<size_t>(split * dv)), ls(static_cast<size_t>(split));
  float M = kNegInf;
  for (int64_t s = 0; s < split; ++s) {
    split_state(p, q, std::min(L, s * span), std::min(L, (s + 1) * span), k, v, os.data() + s * dv, ls[static_cast<size_t>(s)]);
    M = std::max(M, ls[static_cast<size_t>(s)]);
  }
  merge(split, dv, os, ls, M, o, lse);
}

}  // namespace dg::attention_cpu
