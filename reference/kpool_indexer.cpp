// kpool_indexer, written once over Real (kpool_indexer.h has the definition, the order and the tie rule).
#include "reference/kpool_indexer.h"

#include <algorithm>
#include <numeric>
#include <string>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "reference/op_inputs.h"
#include "reference/real/real_ops.h"

namespace dg {

void kpool_indexer_check_params(const KpoolIndexerParams& p) {
  auto bad = [](const std::string& m) { throw InputError("kpool_indexer: " + m); };
  if (p.B < 1) bad(fmt::format("B must be >= 1, got {}", p.B));
  if (p.L < 1 || p.L > (int64_t{1} << 20)) bad(fmt::format("L must be in [1, 2^20], got {}", p.L));
  if (p.H < 1 || p.H > 128) bad(fmt::format("H must be in [1, 128], got {}", p.H));
  if (p.D < 1 || p.D > 1024) bad(fmt::format("D must be in [1, 1024], got {}", p.D));
  if (p.topk < 1 || p.topk > 16384) bad(fmt::format("topk must be in [1, 16384] pools, got {}", p.topk));
}

KpoolInputs kpool_indexer_inputs(const KpoolIndexerParams& p, const Tensor& q, const Tensor& w, const Tensor& k,
                                 const Tensor& gate, const Tensor& ape, const std::vector<int64_t>& ctx,
                                 const std::vector<int64_t>& start) {
  kpool_indexer_check_params(p);
  expect_numel(q, "q", p.B * p.H * p.D, "[B,H,D]");
  expect_numel(w, "w", p.B * p.H, "[B,H]");
  expect_numel(k, "k", p.L * p.D, "[L,D]");
  expect_numel(gate, "gate", p.L * p.D, "[L,D]");
  expect_numel(ape, "ape", kKpoolSize * p.D, "[4,D]");
  if (static_cast<int64_t>(ctx.size()) != p.B || static_cast<int64_t>(start.size()) != p.B)
    throw InputError(fmt::format("kpool_indexer: ctx and start need B = {} rows, got {} and {}", p.B, ctx.size(), start.size()));
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t s = start[static_cast<size_t>(b)], e = ctx[static_cast<size_t>(b)];
    if (s < 0 || s >= e || e > p.L)
      throw InputError(fmt::format("kpool_indexer: row {} must have 0 <= start < ctx <= L = {}, got start {} and ctx {}", b, p.L, s, e));
  }
  return {read_finite(q, "q"), read_finite(w, "w"), read_finite(k, "k"), read_finite(gate, "gate"), read_finite(ape, "ape"), ctx, start};
}

namespace {

// The scores of pools [0, n) of row b (kpool_indexer.h's formula and order).
template <class Real> std::vector<Real> pool_scores(const KpoolIndexerParams& p, const KpoolInputs& in, int64_t b, int64_t n) {
  const Real scale = Real(1.0) / r_sqrt(Real(static_cast<double>(p.D))), zero(0.0);
  const int64_t s0 = in.start[static_cast<size_t>(b)];
  std::vector<Real> out(static_cast<size_t>(n)), key(static_cast<size_t>(p.D));
  for (int64_t pool = 0; pool < n; ++pool) {
    const int64_t t0 = s0 + kKpoolSize * pool;
    for (int64_t c = 0; c < p.D; ++c) {
      Real x[kKpoolSize];
      Real m(0.0), sum(0.0), acc(0.0);
      for (int64_t j = 0; j < kKpoolSize; ++j) {
        x[j] = Real(in.gate[static_cast<size_t>((t0 + j) * p.D + c)]) + Real(in.ape[static_cast<size_t>(j * p.D + c)]);
        if (j == 0 || x[j] > m) m = x[j];
      }
      for (int64_t j = 0; j < kKpoolSize; ++j) {
        x[j] = r_exp(x[j] - m);
        sum += x[j];
      }
      for (int64_t j = 0; j < kKpoolSize; ++j) acc += (x[j] / sum) * Real(in.k[static_cast<size_t>((t0 + j) * p.D + c)]);
      key[static_cast<size_t>(c)] = acc;
    }
    Real score(0.0);
    for (int64_t h = 0; h < p.H; ++h) {
      Real dot(0.0);
      for (int64_t c = 0; c < p.D; ++c) dot += Real(in.q[static_cast<size_t>((b * p.H + h) * p.D + c)]) * key[static_cast<size_t>(c)];
      dot = dot * scale;
      if (dot > zero) score += Real(in.w[static_cast<size_t>(b * p.H + h)]) * dot;
    }
    out[static_cast<size_t>(pool)] = score;
  }
  return out;
}

template <class Real> KpoolIndexerReferenceResult run(const KpoolIndexerParams& p, const KpoolInputs& in, int64_t rows) {
  KpoolIndexerReferenceResult r;
  const int64_t S = p.slots();
  r.indices.assign(static_cast<size_t>(rows * S), -1.0);
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t s0 = in.start[static_cast<size_t>(b)], e = in.ctx[static_cast<size_t>(b)];
    const int64_t P = (e - s0) / kKpoolSize, keep = std::min(P, p.topk);
    const std::vector<Real> s = pool_scores<Real>(p, in, b, P);
    std::vector<int64_t> order(static_cast<size_t>(P));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),   // decreasing score; equal scores keep increasing pool
                     [&](int64_t a, int64_t c) { return s[static_cast<size_t>(a)] > s[static_cast<size_t>(c)]; });
    int64_t slot = b * S;
    for (int64_t j = 0; j < keep; ++j)
      for (int64_t t = 0; t < kKpoolSize; ++t)
        r.indices[static_cast<size_t>(slot++)] = static_cast<double>(s0 + kKpoolSize * order[static_cast<size_t>(j)] + t);
    for (int64_t t = s0 + kKpoolSize * P; t < e; ++t) r.indices[static_cast<size_t>(slot++)] = static_cast<double>(t);
  }
  return r;
}

}  // namespace

KpoolIndexerReferenceResult kpool_indexer_reference(Tier tier, const KpoolIndexerParams& p, const KpoolInputs& in, int64_t rows) {
  if (rows < 0 || rows > p.B) rows = p.B;
  return with_tier(tier, [&](auto real) { return run<decltype(real)>(p, in, rows); });
}

void kpool_indexer_pool_scores(Tier tier, const KpoolIndexerParams& p, const KpoolInputs& in, int64_t n,
                               std::vector<double>& y, std::vector<double>& y_tail) {
  n = std::clamp<int64_t>(n, 0, (in.ctx[0] - in.start[0]) / kKpoolSize);
  y.assign(static_cast<size_t>(n), 0.0);
  y_tail.assign(2 * y.size(), 0.0);
  with_tier(tier, [&](auto real) {
    const auto s = pool_scores<decltype(real)>(p, in, 0, n);
    for (size_t i = 0; i < s.size(); ++i) put_odd(s[i], y, &y_tail, i);
    return 0;
  });
}

}  // namespace dg
