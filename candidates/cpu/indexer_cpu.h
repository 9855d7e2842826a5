// What the indexers' CPU candidates (candidates/cpu/dsa_indexer.cpp, candidates/cpu/kpool_indexer.cpp)
// share: the f32 dot product in 4 interleaved partial sums, and the selection of a row's top-k items.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace dg::indexer_cpu {

// One dot product in 4 interleaved partial sums, added (0 + 1) + (2 + 3).
inline float dot4(const float* a, const float* b, int64_t D) {
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int64_t d = 0;
  for (; d + 4 <= D; d += 4)
    for (int j = 0; j < 4; ++j) acc[j] += a[d + j] * b[d + j];
  for (; d < D; ++d) acc[d % 4] += a[d] * b[d];
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// The min(n, topk) items of the highest scores s[n] (the lower index first on ties): `partial` a
// partial top-k in increasing index, else a full sort in rank order.
inline std::vector<int64_t> select_topk(const std::vector<float>& s, int64_t topk, bool partial) {
  const int64_t n = static_cast<int64_t>(s.size()), k = std::min(n, topk);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  auto rank = [&s](int64_t a, int64_t b) {
    const float x = s[static_cast<size_t>(a)], y = s[static_cast<size_t>(b)];
    return x > y || (x == y && a < b);
  };
  if (!partial) {
    std::sort(idx.begin(), idx.end(), rank);
  } else if (k < n) {
    std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), rank);
    std::sort(idx.begin(), idx.begin() + k);
  }
  idx.resize(static_cast<size_t>(k));
  return idx;
}

}  // namespace dg::indexer_cpu
