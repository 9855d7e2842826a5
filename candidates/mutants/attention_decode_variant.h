// attention_decode's split-KV row with its mutant and equivalent hooks (candidates/mutants/
// attention_decode.cpp describes each), over one head's gathered keys k [L, p.d] and values
// vv [L, p.dv]; mla_decode's mutants (candidates/mutants/mla_decode.cpp) run the same row over the
// latent's keys and values.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "harness/core/dtype.h"
#include "harness/ops/attention_decode.h"

namespace dg::mutants::attention_variant {

struct Variant {
  // mutants
  bool merge_no_max = false, lse_bf16 = false, empty_unguarded = false, scale_dv = false, scale_twice = false,
       p_bf16 = false, lse_base2 = false, gqa_mod = false, partial_page_dropped = false, last_token_dropped = false,
       no_rescale = false, kv_scales_swapped = false;
  // equivalents
  bool more_splits = false, f64 = false, exp2 = false, reversed_heads = false;
};

// T: the arithmetic (float, or double for the f64 equivalent). The exp2 form holds every score,
// max and lse in base 2 (s2 = s log2e) and converts the output lse by ln 2.
template <class T> struct Row {
  const Variant& v;
  const AttentionDecodeParams& p;
  T scale;
  T ex(T x) const { return v.exp2 ? std::exp2(x) : std::exp(x); }
  T lg(T x) const { return v.exp2 ? std::log2(x) : std::log(x); }

  // One tile [t0, t1) of a split (one KV page), attention_cpu::split_tile's order: the scores, the
  // tile's max, m_new, alpha = ex(m - m_new), p_j = ex(s_j - m_new) into a fresh partial l_t (the
  // unrounded p_j) and acc_t (p_j, or p_j rounded to bf16 with p_bf16, times v_j) in increasing j;
  // then l = l alpha + l_t and acc = acc alpha + acc_t (no_rescale: acc + acc_t, l still rescaled).
  void tile(const std::vector<float>& q, int64_t t0, int64_t t1, const std::vector<float>& k, const std::vector<float>& vv,
            T& m, T& l, std::vector<T>& acc) const {
    const int64_t d = p.d, dv = p.dv;
    std::vector<T> s(static_cast<size_t>(t1 - t0)), part(static_cast<size_t>(dv), T(0));
    T mt = -std::numeric_limits<T>::infinity(), lt = 0;
    for (int64_t j = t0; j < t1; ++j) {
      T dot = 0;
      for (int64_t i = 0; i < d; ++i) dot = dot + T(q[static_cast<size_t>(i)]) * T(k[static_cast<size_t>(j * d + i)]);
      mt = std::max(mt, s[static_cast<size_t>(j - t0)] = dot * scale);
    }
    const T m_new = std::max(m, mt), alpha = ex(m - m_new);
    for (int64_t j = t0; j < t1; ++j) {
      const T e = ex(s[static_cast<size_t>(j - t0)] - m_new);
      const T ep = v.p_bf16 ? T(round_bf16(static_cast<float>(e))) : e;
      lt = lt + e;
      for (int64_t c = 0; c < dv; ++c) part[static_cast<size_t>(c)] = part[static_cast<size_t>(c)] + ep * T(vv[static_cast<size_t>(j * dv + c)]);
    }
    l = l * alpha + lt;
    for (int64_t c = 0; c < dv; ++c)
      acc[static_cast<size_t>(c)] = (v.no_rescale ? acc[static_cast<size_t>(c)] : acc[static_cast<size_t>(c)] * alpha) + part[static_cast<size_t>(c)];
    m = m_new;
  }

  // One split's online softmax over tokens [j0, j1), in tiles of one page from j0 (the last may be
  // short): o_p and lse_p.
  void split(const std::vector<float>& q, int64_t j0, int64_t j1, const std::vector<float>& k, const std::vector<float>& vv,
             T* o, T& lse) const {
    const T ninf = -std::numeric_limits<T>::infinity();
    T m = ninf, l = 0;
    std::vector<T> acc(static_cast<size_t>(p.dv), T(0));
    for (int64_t t0 = j0; t0 < j1; t0 += p.page) tile(q, t0, std::min(j1, t0 + p.page), k, vv, m, l, acc);
    const bool guard = !v.empty_unguarded && j1 == j0;
    for (int64_t c = 0; c < p.dv; ++c) o[c] = guard ? T(0) : acc[static_cast<size_t>(c)] / l;
    lse = guard ? ninf : m + lg(l);
    if (v.lse_bf16) lse = T(round_bf16(static_cast<float>(lse)));
  }

  void run(int64_t nsplit, const std::vector<float>& q, int64_t L, const std::vector<float>& k, const std::vector<float>& vv,
           std::vector<float>& o, float& lse) const {
    const int64_t dv = p.dv, pages = (L + p.page - 1) / p.page;
    const int64_t span = attention_decode_pages_per_split(pages, nsplit) * p.page;
    const T ninf = -std::numeric_limits<T>::infinity();
    std::vector<T> os(static_cast<size_t>(nsplit * dv)), ls(static_cast<size_t>(nsplit)), acc(static_cast<size_t>(dv), T(0));
    T M = ninf;
    for (int64_t s = 0; s < nsplit; ++s) {
      split(q, std::min(L, s * span), std::min(L, (s + 1) * span), k, vv, os.data() + s * dv, ls[static_cast<size_t>(s)]);
      M = std::max(M, ls[static_cast<size_t>(s)]);
    }
    if (M == ninf && !v.empty_unguarded) {
      std::fill(o.begin(), o.end(), 0.0f);
      lse = -std::numeric_limits<float>::infinity();
      return;
    }
    T wsum = 0;
    for (int64_t s = 0; s < nsplit; ++s) {
      const T ws = v.merge_no_max ? ex(ls[static_cast<size_t>(s)]) : ex(ls[static_cast<size_t>(s)] - M);
      wsum = wsum + ws;
      for (int64_t c = 0; c < dv; ++c) acc[static_cast<size_t>(c)] = acc[static_cast<size_t>(c)] + ws * os[static_cast<size_t>(s * dv + c)];
    }
    for (int64_t c = 0; c < dv; ++c) o[static_cast<size_t>(c)] = static_cast<float>(acc[static_cast<size_t>(c)] / wsum);
    T out = v.merge_no_max ? lg(wsum) : M + lg(wsum);
    if (v.exp2) out = out * T(0.693147180559945309417);   // ln 2: base 2 to natural
    if (v.lse_base2) out = out * T(1.442695040888963407360);   // log2 e: natural to base 2, reported as natural
    lse = static_cast<float>(out);
    if (v.lse_bf16) lse = round_bf16(lse);
  }
};

}  // namespace dg::mutants::attention_variant
