// gemm_fp8_block, written once over Real (gemm_fp8_block.h has the definition).
#include "reference/gemm_fp8_block.h"

#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "harness/core/threads.h"
#include "reference/gemm.h"
#include "reference/op_inputs.h"
#include "reference/real/f64.h"
#include "reference/real/real_ops.h"

namespace dg {
namespace {

// Output y[m][n] for every row m, from w's row n (wn: K doubles).
template <class Real>
void column(const GemmFp8BlockParams& p, const std::vector<double>& x, const std::vector<double>& xs,
            const std::vector<double>& ws, int64_t n, const double* wn, GemmFp8BlockReferenceResult& r, bool tails) {
  const int64_t K = p.K, KB = p.kb();
  const double* wsn = ws.data() + (n / kFp8Block) * KB;
  std::vector<double>* tail = tails ? &r.y_tail : nullptr;
  for (int64_t m = 0; m < p.M; ++m) {
    const double* xm = x.data() + m * K;
    const double* xsm = xs.data() + m * KB;
    const size_t i = static_cast<size_t>(m * p.N + n);
    if constexpr (std::is_same_v<Real, double>) {
      double s = 0.0, c = 0.0;
      for (int64_t b = 0; b < KB; ++b)
        dot2_step(s, c, fp8_block_partial(xm + b * kFp8Block, wn + b * kFp8Block), xsm[b] * wsn[b]);
      put_odd(s + c, r.y, tail, i);
    } else {
      Real acc(0.0);
      for (int64_t b = 0; b < KB; ++b)
        acc += Real(fp8_block_partial(xm + b * kFp8Block, wn + b * kFp8Block)) * (xsm[b] * wsn[b]);
      put_odd(acc, r.y, tail, i);
    }
  }
}

template <class Real>
GemmFp8BlockReferenceResult run(const GemmFp8BlockParams& p, const std::vector<double>& x,
                                const std::vector<double>& xs, const Tensor& w, const std::vector<double>& ws,
                                bool tails) {
  GemmFp8BlockReferenceResult r;
  r.y.resize(static_cast<size_t>(p.M * p.N));
  if (tails) r.y_tail.assign(2 * r.y.size(), 0.0);
  std::vector<int64_t> bad(static_cast<size_t>(p.N), -1);   // per row of w: its first NaN code
  parallel_for(p.N, [&](int64_t n0, int64_t n1) {
    std::vector<double> row;
    for (int64_t n = n0; n < n1; ++n) {
      bad[static_cast<size_t>(n)] = gemm_read_rows(w, p.K, n, 1, row);
      if (bad[static_cast<size_t>(n)] < 0) column<Real>(p, x, xs, ws, n, row.data(), r, tails);
    }
  });
  for (int64_t i : bad)   // the first in w's order, whatever the threads
    if (i >= 0)
      throw InputError(fmt::format("reference: input 'w' has a non-finite value at element {} of shape {}", i,
                                   w.shape_str()));
  return r;
}

void expect_e4m3(const Tensor& t, const char* name) {
  if (t.dtype() != DType::e4m3)
    throw InputError(fmt::format("gemm_fp8_block reference: input '{}' must be e4m3, got {}", name, dg::name(t.dtype())));
}

}  // namespace

GemmFp8BlockReferenceResult gemm_fp8_block_reference(Tier tier, const GemmFp8BlockParams& p, const Tensor& x,
                                                     const Tensor& x_scale, const Tensor& w, const Tensor& w_scale,
                                                     bool tails) {
  if (p.M < 0 || p.N < 1 || p.K < kFp8Block || p.K % kFp8Block != 0)
    throw InputError("gemm_fp8_block reference: bad parameters (K must be a positive multiple of 128)");
  expect_e4m3(x, "x");
  expect_e4m3(w, "w");
  expect_numel(x, "x", p.M * p.K, "[M,K]");
  expect_numel(x_scale, "x_scale", p.M * p.kb(), "[M,K/128]");
  expect_numel(w, "w", p.N * p.K, "[N,K]");
  expect_numel(w_scale, "w_scale", p.nb() * p.kb(), "[ceil(N/128),K/128]");
  const std::vector<double> xs = read_finite(x, "x"), xss = read_finite(x_scale, "x_scale"),
                            wss = read_finite(w_scale, "w_scale");
  return with_tier(tier, [&](auto real) { return run<decltype(real)>(p, xs, xss, w, wss, tails); });
}

}  // namespace dg
