// Mutants and equivalent variants of kpool_indexer (reference/kpool_indexer.h), each the naive CPU
// candidate's loops (candidates/cpu/kpool_indexer.cpp) with one hook turned. The bugs come from the
// k-pool indexer's physics and its transcriptions (notes/model-ops.md sections 1.4 and 5):
//
//   mutants      equal scores: the higher pool wins; the pool softmax without ape; the softmax over
//                the channels instead of the pool's tokens (the wrong axis); a plain mean for the
//                softmax; the softmax without the max subtracted (exp overflows f32 at large gates,
//                nan_to_num zeroes the weights); pools on the absolute grid from token 0 instead of the
//                first valid token; the ragged tail dropped; the tail scored as a pool (its missing
//                entries masked with finfo.min) competing with the others instead of appended;
//                non-causal (every row pools all L tokens); min(topk, P) - 1 pools; the -1 sentinel
//                written as 0; ReLU dropped; the weights inside the ReLU
//   equivalents  f64 throughout; channels, heads and the pool's tokens in reverse order; the slots in
//                decreasing token order
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/ops/kpool_indexer.h"

namespace dg::mutants {
namespace {

struct Variant {
  // mutants
  bool ties_high = false, no_ape = false, softmax_channels = false, mean_pool = false, no_max = false,
       grid_from_zero = false, tail_dropped = false, tail_scored = false, non_causal = false, topk_minus_one = false,
       sentinel_zero = false, relu_dropped = false, weights_inside_relu = false;
  // equivalents
  bool f64 = false, reverse_order = false, slots_desc = false;
};

struct Row {
  const KpoolIndexerParams& p;
  const std::vector<float>&k, &gate, &ape, &q, &w;
};

// The softmax weights alpha[j * D + c] of the pool of tokens t0 .. t0 + n - 1 (n < 4: the rest masked).
template <class F> std::vector<F> weights(const Variant& v, const Row& r, int64_t t0, int64_t n) {
  const int64_t D = r.p.D;
  std::vector<F> x(static_cast<size_t>(kKpoolSize * D));
  const F masked = std::numeric_limits<float>::lowest();
  for (int64_t j = 0; j < kKpoolSize; ++j)
    for (int64_t c = 0; c < D; ++c)
      x[static_cast<size_t>(j * D + c)] = j >= n ? masked
          : F(r.gate[static_cast<size_t>((t0 + j) * D + c)]) + (v.no_ape ? F(0) : F(r.ape[static_cast<size_t>(j * D + c)]));
  if (v.mean_pool) {
    for (int64_t i = 0; i < kKpoolSize * D; ++i) x[static_cast<size_t>(i)] = i / D < n ? F(1) / F(n) : F(0);
    return x;
  }
  const int64_t groups = v.softmax_channels ? kKpoolSize : D, len = v.softmax_channels ? D : kKpoolSize;
  for (int64_t g = 0; g < groups; ++g) {
    auto at = [&](int64_t i) -> F& { return v.softmax_channels ? x[static_cast<size_t>(g * D + i)] : x[static_cast<size_t>(i * D + g)]; };
    F m = -INFINITY, sum = 0;
    for (int64_t i = 0; i < len; ++i) m = std::max(m, at(i));
    if (v.no_max) m = 0;
    for (int64_t ii = 0; ii < len; ++ii) {
      const int64_t i = v.reverse_order ? len - 1 - ii : ii;
      sum += (at(i) = std::exp(at(i) - m));
    }
    for (int64_t i = 0; i < len; ++i) {
      at(i) = at(i) / sum;
      if (std::isnan(at(i))) at(i) = 0;
    }
  }
  return x;
}

template <class F> F pool_score(const Variant& v, const Row& r, int64_t t0, int64_t n) {
  const int64_t D = r.p.D;
  const std::vector<F> a = weights<F>(v, r, t0, n);
  std::vector<F> key(static_cast<size_t>(D), F(0));
  for (int64_t c = 0; c < D; ++c)
    for (int64_t jj = 0; jj < n; ++jj) {
      const int64_t j = v.reverse_order ? n - 1 - jj : jj;
      key[static_cast<size_t>(c)] += a[static_cast<size_t>(j * D + c)] * F(r.k[static_cast<size_t>((t0 + j) * D + c)]);
    }
  const F scale = static_cast<F>(static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))));
  F sum = 0;
  for (int64_t hh = 0; hh < r.p.H; ++hh) {
    const int64_t h = v.reverse_order ? r.p.H - 1 - hh : hh;
    F dot = 0;
    for (int64_t cc = 0; cc < D; ++cc) {
      const int64_t c = v.reverse_order ? D - 1 - cc : cc;
      dot += F(r.q[static_cast<size_t>(h * D + c)]) * key[static_cast<size_t>(c)];
    }
    dot = dot * scale;
    const F wh = F(r.w[static_cast<size_t>(h)]);
    if (v.relu_dropped) sum += wh * dot;
    else if (v.weights_inside_relu) sum += std::max(wh * dot, F(0));
    else if (dot > F(0)) sum += wh * dot;
  }
  return sum;
}

// One row's ids: the selected pools' tokens in rank order, then the tail, then sentinels.
template <class F> std::vector<double> run_row(const Variant& v, const Row& r, int64_t s0, int64_t e) {
  if (v.grid_from_zero) s0 = 0;
  if (v.non_causal) e = r.p.L;
  const int64_t P = (e - s0) / kKpoolSize, tail0 = s0 + kKpoolSize * P;
  const bool tail_pool = v.tail_scored && tail0 < e;
  std::vector<F> s;
  for (int64_t i = 0; i < P; ++i) s.push_back(pool_score<F>(v, r, s0 + kKpoolSize * i, kKpoolSize));
  if (tail_pool) s.push_back(pool_score<F>(v, r, tail0, e - tail0));
  const int64_t n = static_cast<int64_t>(s.size());
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
    const F x = s[static_cast<size_t>(a)], y = s[static_cast<size_t>(b)];
    return x > y || (x == y && (v.ties_high ? a > b : a < b));
  });
  int64_t keep = std::min(n, r.p.topk);
  if (v.topk_minus_one) keep = std::max<int64_t>(0, keep - 1);
  std::vector<double> row;
  for (int64_t j = 0; j < keep; ++j) {
    const int64_t i = idx[static_cast<size_t>(j)], t0 = s0 + kKpoolSize * i;
    for (int64_t t = t0; t < std::min(t0 + kKpoolSize, e); ++t) row.push_back(static_cast<double>(t));
  }
  if (!v.tail_dropped && !v.tail_scored)
    for (int64_t t = tail0; t < e; ++t) row.push_back(static_cast<double>(t));
  if (v.slots_desc) std::sort(row.begin(), row.end(), std::greater<double>());
  row.resize(static_cast<size_t>(r.p.slots()), v.sentinel_zero ? 0.0 : -1.0);
  return row;
}

RunFn variant(Variant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) {
    const KpoolIndexerParams p = kpool_indexer_params(c);
    std::vector<float> k(static_cast<size_t>(p.L * p.D)), gate(k.size()), ape(static_cast<size_t>(kKpoolSize * p.D));
    std::vector<float> q(static_cast<size_t>(p.H * p.D)), w(static_cast<size_t>(p.H));
    load_row(in.at("k"), 0, p.L * p.D, k.data());
    load_row(in.at("gate"), 0, p.L * p.D, gate.data());
    load_row(in.at("ape"), 0, kKpoolSize * p.D, ape.data());
    const int64_t S = p.slots();
    for (int64_t b = 0; b < p.B; ++b) {
      load_row(in.at("q"), b * p.H * p.D, p.H * p.D, q.data());
      load_row(in.at("w"), b * p.H, p.H, w.data());
      const Row r{p, k, gate, ape, q, w};
      const int64_t s0 = static_cast<int64_t>(in.at("start").get(b)), e = static_cast<int64_t>(in.at("ctx").get(b));
      const std::vector<double> row = v.f64 ? run_row<double>(v, r, s0, e) : run_row<float>(v, r, s0, e);
      for (int64_t j = 0; j < S; ++j) out.at("indices").set(b * S + j, row[static_cast<size_t>(j)]);
    }
  };
}

CandidateInfo info(const std::string& name, const char* kind, const std::string& doc) {
  return {"kpool_indexer_" + name, "kpool_indexer", "cpu", kind, DType::f32, DType::f32, DType::f32, doc};
}

#define DG_KPOOL_INDEXER_VARIANT(id, kind, doc, field)                               \
  DG_REGISTER_CANDIDATE(kpool_indexer_##id, info(#id, kind, doc), [] {               \
    Variant v;                                                                       \
    v.field = true;                                                                  \
    return variant(v);                                                               \
  }())

DG_KPOOL_INDEXER_VARIANT(mutant_ties_high_index, "mutant", "equal pool scores: the higher pool wins", ties_high);
DG_KPOOL_INDEXER_VARIANT(mutant_no_ape, "mutant", "the pool softmax without ape", no_ape);
DG_KPOOL_INDEXER_VARIANT(mutant_softmax_channels, "mutant", "the softmax over the channels, not the pool's 4 tokens", softmax_channels);
DG_KPOOL_INDEXER_VARIANT(mutant_mean_pool, "mutant", "a plain mean of the pool's keys for the gated softmax", mean_pool);
DG_KPOOL_INDEXER_VARIANT(mutant_softmax_no_max, "mutant", "exp(gate + ape) without the max subtracted (overflow, then nan_to_num)", no_max);
DG_KPOOL_INDEXER_VARIANT(mutant_grid_from_zero, "mutant", "pools on the grid from token 0, not from the first valid token", grid_from_zero);
DG_KPOOL_INDEXER_VARIANT(mutant_tail_dropped, "mutant", "the ragged tail not appended", tail_dropped);
DG_KPOOL_INDEXER_VARIANT(mutant_tail_scored, "mutant", "the tail scored as a masked pool, competing instead of appended", tail_scored);
DG_KPOOL_INDEXER_VARIANT(mutant_non_causal, "mutant", "every row pools all L tokens, future ones included", non_causal);
DG_KPOOL_INDEXER_VARIANT(mutant_topk_minus_one, "mutant", "min(topk, P) - 1 pools selected", topk_minus_one);
DG_KPOOL_INDEXER_VARIANT(mutant_sentinel_zero, "mutant", "unused slots written 0 instead of -1", sentinel_zero);
DG_KPOOL_INDEXER_VARIANT(mutant_relu_dropped, "mutant", "sum_h w_h (q_h . key) D^-0.5 without the ReLU", relu_dropped);
DG_KPOOL_INDEXER_VARIANT(mutant_weights_inside_relu, "mutant", "sum_h ReLU(w_h q_h . key D^-0.5): the weights inside the ReLU", weights_inside_relu);
DG_KPOOL_INDEXER_VARIANT(equivalent_f64, "equivalent", "softmax, pooling, scores and selection in f64", f64);
DG_KPOOL_INDEXER_VARIANT(equivalent_reverse_order, "equivalent", "channels, heads and the pool's tokens in reverse order", reverse_order);
DG_KPOOL_INDEXER_VARIANT(equivalent_slots_desc, "equivalent", "the ids in decreasing token order", slots_desc);

}  // namespace
}  // namespace dg::mutants
