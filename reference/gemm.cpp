// gemm, written once over Real (gemm.h has the definition).
#include "reference/gemm.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "harness/core/threads.h"
#include "reference/op_inputs.h"
#include "reference/real/f64.h"
#include "reference/real/real_ops.h"

namespace dg {
namespace {

constexpr int64_t kCols = 8;   // output columns per block: one AVX-512 vector of the f64 tier's lanes

// Output columns [n0, n0 + nb) of every row; rows holds their weights (gemm_read_rows).
template <class Real>
void block(const GemmParams& p, const std::vector<double>& x, const std::vector<double>& b, int64_t n0, int64_t nb,
           const std::vector<double>& rows, std::vector<double>& wt, GemmReferenceResult& r, bool tails) {
  const int64_t M = p.M, N = p.N, K = p.K;
  std::vector<double>* tail = tails ? &r.y_tail : nullptr;
  if constexpr (std::is_same_v<Real, double>) {
    // Dot2 per column in lane l of kCols: the weights packed [K, kCols] (zero past nb) so the lanes
    // vectorize; each lane's steps are the scalar Dot2's in increasing k.
    wt.assign(static_cast<size_t>(K * kCols), 0.0);
    for (int64_t l = 0; l < nb; ++l)
      for (int64_t k = 0; k < K; ++k) wt[static_cast<size_t>(k * kCols + l)] = rows[static_cast<size_t>(l * K + k)];
    for (int64_t m = 0; m < M; ++m) {
      double s[kCols] = {}, c[kCols] = {};
      const double* xm = x.data() + m * K;
      for (int64_t k = 0; k < K; ++k) {
        const double a = xm[k];
        const double* wk = wt.data() + k * kCols;
        for (int64_t l = 0; l < kCols; ++l) dot2_step(s[l], c[l], a, wk[l]);
      }
      for (int64_t l = 0; l < nb; ++l) {
        if (p.bias) sum2_step(s[l], c[l], b[static_cast<size_t>(n0 + l)]);
        put_odd(s[l] + c[l], r.y, tail, static_cast<size_t>(m * N + n0 + l));
      }
    }
  } else {
    (void)wt;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t l = 0; l < nb; ++l) {
        const double* xm = x.data() + m * K;
        const double* wn = rows.data() + l * K;
        Real acc(0.0);
        for (int64_t k = 0; k < K; ++k) acc += Real(xm[k]) * wn[k];
        if (p.bias) acc = acc + b[static_cast<size_t>(n0 + l)];
        put_odd(acc, r.y, tail, static_cast<size_t>(m * N + n0 + l));
      }
  }
}

template <class Real>
GemmReferenceResult gemm(const GemmParams& p, const std::vector<double>& x, const Tensor& w, const std::vector<double>& b,
                         bool tails) {
  GemmReferenceResult r;
  r.y.resize(static_cast<size_t>(p.M * p.N));
  if (tails) r.y_tail.assign(2 * r.y.size(), 0.0);
  const int64_t blocks = (p.N + kCols - 1) / kCols;
  std::vector<int64_t> bad(static_cast<size_t>(blocks), -1);   // per block: its first non-finite weight
  parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    std::vector<double> rows, wt;
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t n0 = blk * kCols, nb = std::min(kCols, p.N - n0);
      bad[static_cast<size_t>(blk)] = gemm_read_rows(w, p.K, n0, nb, rows);
      if (bad[static_cast<size_t>(blk)] < 0) block<Real>(p, x, b, n0, nb, rows, wt, r, tails);
    }
  });
  for (int64_t i : bad)   // the first in w's order, whatever the threads
    if (i >= 0)
      throw InputError(fmt::format("reference: input 'w' has a non-finite value at element {} of shape {}", i,
                                   w.shape_str()));
  return r;
}

}  // namespace

int64_t gemm_read_rows(const Tensor& w, int64_t K, int64_t n0, int64_t nb, std::vector<double>& rows) {
  rows.resize(static_cast<size_t>(nb * K));
  w.read(n0 * K, rows);
  for (size_t i = 0; i < rows.size(); ++i)
    if (!std::isfinite(rows[i])) return n0 * K + static_cast<int64_t>(i);
  return -1;
}

GemmReferenceResult gemm_reference(Tier tier, const GemmParams& p, const Tensor& x, const Tensor& w, const Tensor* bias,
                                   bool tails) {
  if (p.M < 0 || p.N < 1 || p.K < 1 || p.bias != (bias != nullptr)) throw InputError("gemm reference: bad parameters");
  expect_numel(x, "x", p.M * p.K, "[M,K]");
  expect_numel(w, "w", p.N * p.K, "[N,K]");
  if (bias) expect_numel(*bias, "bias", p.N, "[N]");
  const std::vector<double> xs = read_finite(x, "x");
  const std::vector<double> bs = bias ? read_finite(*bias, "bias") : std::vector<double>{};
  return with_tier(tier, [&](auto real) { return gemm<decltype(real)>(p, xs, w, bs, tails); });
}

}  // namespace dg
