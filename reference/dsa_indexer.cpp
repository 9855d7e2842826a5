// dsa_indexer, written once over Real (dsa_indexer.h has the definition, the order and the tie rule).
#include "reference/dsa_indexer.h"

#include <algorithm>
#include <numeric>
#include <string>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "reference/op_inputs.h"
#include "reference/real/real_ops.h"

namespace dg {

void dsa_indexer_check_params(const DsaIndexerParams& p) {
  auto bad = [](const std::string& m) { throw InputError("dsa_indexer: " + m); };
  if (p.B < 1) bad(fmt::format("B must be >= 1, got {}", p.B));
  if (p.L < 1 || p.L > (int64_t{1} << 20)) bad(fmt::format("L must be in [1, 2^20], got {}", p.L));
  if (p.H < 1 || p.H > 128) bad(fmt::format("H must be in [1, 128], got {}", p.H));
  if (p.D < 1 || p.D > 1024) bad(fmt::format("D must be in [1, 1024], got {}", p.D));
  if (p.topk < 1 || p.topk > 65536) bad(fmt::format("topk must be in [1, 65536], got {}", p.topk));
}

namespace {

struct Inputs {
  std::vector<double> q, k, w;
};

Inputs read_inputs(const DsaIndexerParams& p, const Tensor& q, const Tensor& k, const Tensor& w) {
  dsa_indexer_check_params(p);
  expect_numel(q, "q", p.B * p.H * p.D, "[B,H,D]");
  expect_numel(k, "k", p.L * p.D, "[L,D]");
  expect_numel(w, "w", p.B * p.H, "[B,H]");
  return {read_finite(q, "q"), read_finite(k, "k"), read_finite(w, "w")};
}

// The scores of keys [0, n) of row b: sum_h (w_h (H D)^-0.5) ReLU(q_h . k_s), d then h ascending.
template <class Real> std::vector<Real> row_scores(const DsaIndexerParams& p, const Inputs& in, int64_t b, int64_t n) {
  const Real scale = Real(1.0) / r_sqrt(Real(static_cast<double>(p.H * p.D)));
  std::vector<Real> q(static_cast<size_t>(p.H * p.D)), ws(static_cast<size_t>(p.H));
  for (int64_t i = 0; i < p.H * p.D; ++i) q[static_cast<size_t>(i)] = Real(in.q[static_cast<size_t>(b * p.H * p.D + i)]);
  for (int64_t h = 0; h < p.H; ++h) ws[static_cast<size_t>(h)] = Real(in.w[static_cast<size_t>(b * p.H + h)]) * scale;
  std::vector<Real> s(static_cast<size_t>(n));
  const Real zero(0.0);
  for (int64_t t = 0; t < n; ++t) {
    const double* kr = in.k.data() + t * p.D;
    Real sum(0.0);
    for (int64_t h = 0; h < p.H; ++h) {
      const Real* qh = q.data() + h * p.D;
      Real dot(0.0);
      for (int64_t d = 0; d < p.D; ++d) dot += qh[d] * Real(kr[d]);
      if (dot > zero) sum += ws[static_cast<size_t>(h)] * dot;
    }
    s[static_cast<size_t>(t)] = sum;
  }
  return s;
}

template <class Real>
DsaIndexerReferenceResult run(const DsaIndexerParams& p, const Inputs& in, const std::vector<int64_t>& ctx, bool tails,
                              int64_t rows) {
  DsaIndexerReferenceResult r;
  r.indices.assign(static_cast<size_t>(rows * p.topk), -1.0);
  r.scores.assign(r.indices.size(), 0.0);
  if (tails) r.scores_tail.assign(2 * r.indices.size(), 0.0);
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t n = ctx[static_cast<size_t>(b)], k = std::min(n, p.topk);
    const std::vector<Real> s = row_scores<Real>(p, in, b, n);
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),   // decreasing score; equal scores keep increasing index
                     [&](int64_t a, int64_t c) { return s[static_cast<size_t>(a)] > s[static_cast<size_t>(c)]; });
    for (int64_t j = 0; j < k; ++j) {
      const size_t o = static_cast<size_t>(b * p.topk + j);
      r.indices[o] = static_cast<double>(order[static_cast<size_t>(j)]);
      put_odd(s[static_cast<size_t>(order[static_cast<size_t>(j)])], r.scores, tails ? &r.scores_tail : nullptr, o);
    }
  }
  return r;
}

}  // namespace

DsaIndexerReferenceResult dsa_indexer_reference(Tier tier, const DsaIndexerParams& p, const Tensor& q, const Tensor& k,
                                                const Tensor& w, const std::vector<int64_t>& ctx, bool tails, int64_t rows) {
  const Inputs in = read_inputs(p, q, k, w);
  if (static_cast<int64_t>(ctx.size()) != p.B) throw InputError(fmt::format("dsa_indexer: ctx has {} rows for B = {}", ctx.size(), p.B));
  for (int64_t c : ctx)
    if (c < 0 || c > p.L) throw InputError(fmt::format("dsa_indexer: a context length must be in [0, L = {}], got {}", p.L, c));
  if (rows < 0 || rows > p.B) rows = p.B;
  return with_tier(tier, [&](auto real) { return run<decltype(real)>(p, in, ctx, tails, rows); });
}

void dsa_indexer_row_scores(Tier tier, const DsaIndexerParams& p, const Tensor& q, const Tensor& k, const Tensor& w,
                            int64_t n, std::vector<double>& y, std::vector<double>& y_tail) {
  const Inputs in = read_inputs(p, q, k, w);
  n = std::clamp<int64_t>(n, 0, p.L);
  y.assign(static_cast<size_t>(n), 0.0);
  y_tail.assign(2 * y.size(), 0.0);
  with_tier(tier, [&](auto real) {
    const auto s = row_scores<decltype(real)>(p, in, 0, n);
    for (size_t i = 0; i < s.size(); ++i) put_odd(s[i], y, &y_tail, i);
    return 0;
  });
}

}  // namespace dg
