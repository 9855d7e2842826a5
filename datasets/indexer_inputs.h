// What the indexers' regimes (datasets/dsa_indexer.cpp, datasets/kpool_indexer.cpp) share: the
// normal draws of a case's tensors, the LayerNormed keys, storing a tensor, and the pieces of the
// near_ties / exact_ties construction (the rows' items ranked by the reference's rule, a random free
// item to copy a boundary item to, and the 2^U(0,6)-ulp nudge of a near tie).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/core/rng.h"

namespace dg::indexer_inputs {

// n draws of N(0, sd^2) from the case's stream `name`.
inline std::vector<double> normals(const Case& c, const char* name, int64_t n, double sd) {
  std::vector<double> v(static_cast<size_t>(n));
  TensorRng(c.seed(), c.str(), name).normal(0, v);
  for (double& x : v) x = sd * x;
  return v;
}

// LayerNormed keys [L, D] before rounding: N(0,1) around a per-channel bias beta ~ N(0, 0.3^2).
inline std::vector<double> layernormed_keys(const Case& c, int64_t L, int64_t D) {
  std::vector<double> k = normals(c, "k", L * D, 1.0);
  const std::vector<double> beta = normals(c, "ln_bias", D, 0.3);
  for (int64_t i = 0; i < L * D; ++i) k[static_cast<size_t>(i)] += beta[static_cast<size_t>(i % D)];
  return k;
}

inline Tensor stored(DType dt, std::vector<int64_t> shape, const std::vector<double>& v) {
  Tensor t(dt, std::move(shape));
  t.write(0, v);
  return t;
}

// The items 0 .. s.size()-1 by descending score, the lower index first on ties (the reference's rule).
inline std::vector<int64_t> ranked(const std::vector<double>& s) {
  std::vector<int64_t> order(s.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t e) { return s[static_cast<size_t>(a)] > s[static_cast<size_t>(e)]; });
  return order;
}

// A uniformly drawn item not yet taken (up to 65 tries on `rng` from `draw`), marked taken; -1 when
// every try hit a taken one.
inline int64_t take_free(const TensorRng& rng, uint64_t& draw, std::vector<char>& taken) {
  const double n = static_cast<double>(taken.size());
  int64_t dst = static_cast<int64_t>(rng.uniform(draw++) * n);
  for (int tries = 0; taken[static_cast<size_t>(dst)] && tries < 64; ++tries) dst = static_cast<int64_t>(rng.uniform(draw++) * n);
  if (taken[static_cast<size_t>(dst)]) return -1;
  taken[static_cast<size_t>(dst)] = 1;
  return dst;
}

// x moved by 2^U(0,6) ulps of dt, either sign (a near tie), rounded to dt.
inline void nudge_ulps(DType dt, const TensorRng& rng, uint64_t& draw, double& x) {
  const double steps = std::exp2(std::floor(rng.uniform(draw++) * 7.0)), sign = rng.uniform(draw++) < 0.5 ? -1.0 : 1.0;
  x = round_to(dt, x + sign * steps * ulp(dt, x));
}

}  // namespace dg::indexer_inputs
