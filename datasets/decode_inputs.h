// What the decode-attention regimes (datasets/attention_decode.cpp, datasets/mla_decode.cpp) share:
// the pool's page layout drawn from the case's seed, the key shaping of the few_dominant and
// large_logits regimes, and the rounding of a generated tensor to its stored dtype. A key pool is
// [n_pages, page, n_kv, d] (MLA's latent cache: n_kv 1, d = d_c + rope).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "datasets/dists.h"
#include "harness/core/dtype.h"
#include "harness/ops/attention_decode.h"

namespace dg::decode_inputs {

enum class Shape { typical, few_dominant, near_uniform, large_logits };

struct Layout {
  AttentionDecodeParams p;
  std::vector<int64_t> lens;
  std::vector<double> table;   // [B, max_pages]
};

// Pool pages drawn as a permutation (Fisher-Yates on the case's "pages" stream), handed out in
// sequence order; the permutation's last page is the spare.
inline Layout layout(const Case& c, const AttentionDecodeParams& p) {
  Layout l{p, attention_decode_lens(c), {}};
  const int64_t n = l.p.n_pages;
  std::vector<double> u(static_cast<size_t>(n));
  TensorRng(c.seed(), c.str(), "pages").uniform(0, u);
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(std::min<int64_t>(i, static_cast<int64_t>(u[static_cast<size_t>(i)] * static_cast<double>(i + 1))))]);
  l.table.assign(static_cast<size_t>(l.p.B * l.p.max_pages), 0.0);
  size_t next = 0;
  for (int64_t b = 0; b < l.p.B; ++b)
    for (int64_t j = 0; j < (l.lens[static_cast<size_t>(b)] + l.p.page - 1) / l.p.page; ++j)
      l.table[static_cast<size_t>(b * l.p.max_pages + j)] = static_cast<double>(perm[next++]);
  return l;
}

inline int64_t key_offset(const Layout& l, int64_t b, int64_t j, int64_t g) {
  const int64_t page = static_cast<int64_t>(l.table[static_cast<size_t>(b * l.p.max_pages + j / l.p.page)]);
  return ((page * l.p.page + j % l.p.page) * l.p.n_kv + g) * l.p.d;
}

// The key direction of kv head g of sequence b that raises every score of its q heads together:
// k = a qbar with qbar the group's mean query and a such that the group's mean score is `target`.
inline std::vector<double> aligned_key(const Layout& l, const std::vector<double>& q, int64_t b, int64_t g, double target) {
  const int64_t group = l.p.n_h / l.p.n_kv, d = l.p.d;
  std::vector<double> qbar(static_cast<size_t>(d), 0.0);
  for (int64_t h = g * group; h < (g + 1) * group; ++h)
    for (int64_t i = 0; i < d; ++i) qbar[static_cast<size_t>(i)] += q[static_cast<size_t>((b * l.p.n_h + h) * d + i)] / static_cast<double>(group);
  double mean_score = 0;
  for (int64_t h = g * group; h < (g + 1) * group; ++h)
    for (int64_t i = 0; i < d; ++i)
      mean_score += l.p.scale * q[static_cast<size_t>((b * l.p.n_h + h) * d + i)] * qbar[static_cast<size_t>(i)] / static_cast<double>(group);
  for (double& x : qbar) x *= target / mean_score;
  return qbar;
}

// Keys of the shaped regimes: few_dominant sets three keys per (sequence, kv head) to a score of 14
// (one of them the last token, in the partial last page when there is one); large_logits moves
// every key of the sequence to a score of +-100 (sign alternating by sequence) plus the N(0,1/4)
// spread of half the drawn key.
inline void shape_keys(const Case& c, Shape shape, const Layout& l, const std::vector<double>& q, std::vector<double>& k) {
  std::vector<double> u(static_cast<size_t>(l.p.B * l.p.n_kv * 2));
  TensorRng(c.seed(), c.str(), "dominant").uniform(0, u);
  for (int64_t b = 0; b < l.p.B; ++b) {
    const int64_t L = l.lens[static_cast<size_t>(b)];
    if (L == 0) continue;
    for (int64_t g = 0; g < l.p.n_kv; ++g) {
      if (shape == Shape::few_dominant) {
        const std::vector<double> a = aligned_key(l, q, b, g, 14.0);
        const size_t ui = static_cast<size_t>((b * l.p.n_kv + g) * 2);
        for (int64_t j : {static_cast<int64_t>(u[ui] * static_cast<double>(L)), static_cast<int64_t>(u[ui + 1] * static_cast<double>(L)), L - 1})
          std::copy(a.begin(), a.end(), k.begin() + key_offset(l, b, j, g));
      } else {
        const std::vector<double> a = aligned_key(l, q, b, g, b % 2 ? -100.0 : 100.0);
        for (int64_t j = 0; j < L; ++j)
          for (int64_t i = 0; i < l.p.d; ++i) {
            double& x = k[static_cast<size_t>(key_offset(l, b, j, g) + i)];
            x = a[static_cast<size_t>(i)] + 0.5 * x;
          }
      }
    }
  }
}

inline Tensor stored(DType dt, std::vector<int64_t> shape, std::vector<double> v) {
  for (double& x : v) x = round_to(dt, x);
  Tensor t(dt, std::move(shape));
  t.write(0, v);
  return t;
}

}  // namespace dg::decode_inputs
