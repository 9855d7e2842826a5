// Mutants and equivalent variants of dsa_indexer (reference/dsa_indexer.h), each the naive CPU
// candidate's loops (candidates/cpu/dsa_indexer.cpp) with one hook turned. The bugs come from the
// indexer's physics and its production forms (notes/model-ops.md sections 1.4 and 5):
//
//   mutants      equal scores: the higher index wins (a wrong tie rule); a threshold top-k that keeps
//                every key scoring >= the k-th and fills the slots in index order (no tie rule: a tie
//                at rank k overflows and pushes out the highest-index keys); non-causal (every row
//                scores all L keys); the diagonal masked (s < ctx - 1: the token's own key dropped);
//                ReLU dropped; ReLU after the head sum; the weights inside the ReLU (ReLU(w q.k));
//                softmax over the head weights (biased weights); the (H D)^-0.5 scale missing;
//                topk - 1 keys selected; the -1 sentinel written as 0; the scores rounded to bf16 (a
//                bf16 logits buffer)
//   equivalents  scores in f64 (rounded to f32 once for the output); heads and d in reverse order;
//                the slots in decreasing key index; a stable sort by score alone (the tie rule by
//                stability)
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/dsa_indexer.h"

namespace dg::mutants {
namespace {

struct Variant {
  // mutants
  bool ties_high = false, threshold_fill = false, non_causal = false, diagonal_masked = false, relu_dropped = false,
       relu_after_sum = false, weights_inside_relu = false, softmax_weights = false, unscaled = false,
       topk_minus_one = false, sentinel_zero = false, scores_bf16 = false;
  // equivalents
  bool f64 = false, reverse_order = false, slots_desc = false, stable_sort = false;
};

template <class F> std::vector<F> head_weights(const Variant& v, const DsaIndexerParams& p, const std::vector<float>& w) {
  std::vector<F> ws(w.begin(), w.end());
  if (v.softmax_weights) {
    F mx = ws[0], sum = 0;
    for (F x : ws) mx = std::max(mx, x);
    for (F& x : ws) sum += (x = std::exp(x - mx));
    for (F& x : ws) x = x / sum;
  }
  const F scale = static_cast<F>(static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.H * p.D))));
  if (!v.unscaled)
    for (F& x : ws) x = x * scale;
  return ws;
}

template <class F>
std::vector<F> scores(const Variant& v, const DsaIndexerParams& p, const std::vector<float>& q, const std::vector<float>& w,
                      const std::vector<float>& k, int64_t n) {
  const std::vector<F> ws = head_weights<F>(v, p, w);
  std::vector<F> s(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    F sum = 0;
    for (int64_t hh = 0; hh < p.H; ++hh) {
      const int64_t h = v.reverse_order ? p.H - 1 - hh : hh;
      F dot = 0;
      for (int64_t dd = 0; dd < p.D; ++dd) {
        const int64_t d = v.reverse_order ? p.D - 1 - dd : dd;
        dot += F(q[static_cast<size_t>(h * p.D + d)]) * F(k[static_cast<size_t>(t * p.D + d)]);
      }
      const F wh = ws[static_cast<size_t>(h)];
      if (v.relu_dropped || v.relu_after_sum) sum += wh * dot;
      else if (v.weights_inside_relu) sum += std::max(wh * dot, F(0));
      else if (dot > F(0)) sum += wh * dot;
    }
    if (v.relu_after_sum) sum = std::max(sum, F(0));
    if (v.scores_bf16) sum = F(round_bf16(static_cast<float>(sum)));
    s[static_cast<size_t>(t)] = sum;
  }
  return s;
}

template <class F> std::vector<int64_t> select(const Variant& v, const std::vector<F>& s, int64_t topk) {
  const int64_t n = static_cast<int64_t>(s.size());
  int64_t k = std::min(n, topk);
  if (v.topk_minus_one) k = std::max<int64_t>(0, k - 1);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  auto at = [&s](int64_t i) { return s[static_cast<size_t>(i)]; };
  if (v.stable_sort) std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return at(a) > at(b); });
  else std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
    return at(a) > at(b) || (at(a) == at(b) && (v.ties_high ? a > b : a < b));
  });
  if (v.threshold_fill && k > 0) {   // every key >= the k-th score, in index order, cut at k
    const F kth = at(idx[static_cast<size_t>(k - 1)]);
    idx.clear();
    for (int64_t i = 0; i < n && static_cast<int64_t>(idx.size()) < k; ++i)
      if (at(i) >= kth) idx.push_back(i);
  }
  idx.resize(static_cast<size_t>(k));
  if (v.slots_desc) std::sort(idx.begin(), idx.end(), std::greater<int64_t>());
  return idx;
}

template <class F>
void run_row(const Variant& v, const DsaIndexerParams& p, const std::vector<float>& q, const std::vector<float>& w,
             const std::vector<float>& k, int64_t n, std::vector<double>& ids, std::vector<float>& out_s) {
  const std::vector<F> s = scores<F>(v, p, q, w, k, n);
  const std::vector<int64_t> sel = select<F>(v, s, p.topk);
  ids.assign(static_cast<size_t>(p.topk), v.sentinel_zero ? 0.0 : -1.0);
  out_s.assign(static_cast<size_t>(p.topk), 0.0f);
  for (size_t j = 0; j < sel.size(); ++j) {
    ids[j] = static_cast<double>(sel[j]);
    out_s[j] = static_cast<float>(s[static_cast<size_t>(sel[j])]);
  }
}

RunFn variant(Variant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) {
    const DsaIndexerParams p = dsa_indexer_params(c);
    std::vector<float> k(static_cast<size_t>(p.L * p.D)), q(static_cast<size_t>(p.H * p.D)), w(static_cast<size_t>(p.H)), s;
    std::vector<double> ids;
    load_row(in.at("k"), 0, p.L * p.D, k.data());
    for (int64_t b = 0; b < p.B; ++b) {
      load_row(in.at("q"), b * p.H * p.D, p.H * p.D, q.data());
      load_row(in.at("w"), b * p.H, p.H, w.data());
      int64_t n = static_cast<int64_t>(in.at("ctx").get(b));
      if (v.non_causal) n = p.L;
      if (v.diagonal_masked) n = n - 1;
      if (v.f64) run_row<double>(v, p, q, w, k, n, ids, s);
      else run_row<float>(v, p, q, w, k, n, ids, s);
      for (int64_t j = 0; j < p.topk; ++j) out.at("indices").set(b * p.topk + j, ids[static_cast<size_t>(j)]);
      store_row(out.at("scores"), b * p.topk, p.topk, s.data());
    }
  };
}

CandidateInfo info(const std::string& name, const char* kind, const std::string& doc) {
  return {"dsa_indexer_" + name, "dsa_indexer", "cpu", kind, DType::f32, DType::f32, DType::f32, doc};
}

#define DG_DSA_INDEXER_VARIANT(id, kind, doc, field)                                 \
  DG_REGISTER_CANDIDATE(dsa_indexer_##id, info(#id, kind, doc), [] {                 \
    Variant v;                                                                       \
    v.field = true;                                                                  \
    return variant(v);                                                               \
  }())

DG_DSA_INDEXER_VARIANT(mutant_ties_high_index, "mutant", "equal scores: the higher key index wins", ties_high);
DG_DSA_INDEXER_VARIANT(mutant_threshold_fill, "mutant", "top-k without a tie rule: keys >= the k-th score in index order, cut at k", threshold_fill);
DG_DSA_INDEXER_VARIANT(mutant_non_causal, "mutant", "every row scores all L keys, future ones included", non_causal);
DG_DSA_INDEXER_VARIANT(mutant_diagonal_masked, "mutant", "causal mask s < ctx - 1: the token's own key dropped", diagonal_masked);
DG_DSA_INDEXER_VARIANT(mutant_relu_dropped, "mutant", "sum_h w_h q_h.k without the ReLU", relu_dropped);
DG_DSA_INDEXER_VARIANT(mutant_relu_after_sum, "mutant", "ReLU(sum_h w_h q_h.k): the ReLU after the head sum", relu_after_sum);
DG_DSA_INDEXER_VARIANT(mutant_weights_inside_relu, "mutant", "sum_h ReLU(w_h q_h.k): the weights inside the ReLU", weights_inside_relu);
DG_DSA_INDEXER_VARIANT(mutant_softmax_weights, "mutant", "softmax over the head weights before scaling (biased weights)", softmax_weights);
DG_DSA_INDEXER_VARIANT(mutant_unscaled, "mutant", "the (H D)^-0.5 weight scale missing", unscaled);
DG_DSA_INDEXER_VARIANT(mutant_topk_minus_one, "mutant", "min(topk, ctx) - 1 keys selected", topk_minus_one);
DG_DSA_INDEXER_VARIANT(mutant_sentinel_zero, "mutant", "unused slots written 0 instead of -1", sentinel_zero);
DG_DSA_INDEXER_VARIANT(mutant_scores_bf16, "mutant", "scores rounded to bf16 before the top-k (a bf16 logits buffer)", scores_bf16);
DG_DSA_INDEXER_VARIANT(equivalent_f64, "equivalent", "scores and selection in f64, the scores rounded to f32 once", f64);
DG_DSA_INDEXER_VARIANT(equivalent_reverse_order, "equivalent", "heads and the dot product's d in reverse order", reverse_order);
DG_DSA_INDEXER_VARIANT(equivalent_slots_desc, "equivalent", "the selected keys in decreasing index", slots_desc);
DG_DSA_INDEXER_VARIANT(equivalent_stable_sort, "equivalent", "a stable sort by score alone (ties keep index order)", stable_sort);

}  // namespace
}  // namespace dg::mutants
