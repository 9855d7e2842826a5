// CPU candidates of kpool_indexer (reference/kpool_indexer.h), both in f32 as the HF and vLLM forms
// compute the pool softmax and scores:
//   kpool_indexer_cpu_naive_f32    the policy's naive: plain loops. Per row and complete pool, per
//                                  channel x_j = gate + ape (f32), the softmax over the pool's 4 tokens
//                                  with the max subtracted (NaN weights zeroed, production's
//                                  nan_to_num), the pooled key sum_j alpha_j k_j; per head the dot
//                                  product over c ascending times f32(D^-0.5), ReLU, times w_h, summed
//                                  over h ascending; the pools sorted by (score desc, pool asc), the
//                                  first min(topk, P) expanded in rank order, then the tail, then -1
//   kpool_indexer_cpu_pooled_f32   the production form: the row's pooled keys first, as a pooled-key
//                                  cache [P,D] in f32, then pools in blocks of 64 against all heads,
//                                  each dot product in 4 interleaved partial sums; the selection by a
//                                  partial top-k (nth_element with the key (score desc, pool asc));
//                                  the tail's tokens first, then the selected pools in increasing
//                                  order, then -1
// Both read q, k and gate as f32 (exact for f32 and bf16 storage) and write the ids (the harness
// allocates them in i32).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "candidates/cpu/indexer_cpu.h"
#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/ops/kpool_indexer.h"

namespace dg {
namespace {

struct Cache {
  std::vector<float> k, gate, ape;
};

// The pooled key of the pool whose first token is t0.
void pooled_key(const Cache& x, int64_t D, int64_t t0, float* key) {
  for (int64_t c = 0; c < D; ++c) {
    float v[kKpoolSize], m = -INFINITY, sum = 0.0f;
    for (int64_t j = 0; j < kKpoolSize; ++j) {
      v[j] = x.gate[static_cast<size_t>((t0 + j) * D + c)] + x.ape[static_cast<size_t>(j * D + c)];
      m = std::max(m, v[j]);
    }
    for (float& e : v) sum += (e = std::exp(e - m));
    float acc = 0.0f;
    for (int64_t j = 0; j < kKpoolSize; ++j) {
      float a = v[j] / sum;
      if (std::isnan(a)) a = 0.0f;
      acc += a * x.k[static_cast<size_t>((t0 + j) * D + c)];
    }
    key[c] = acc;
  }
}

std::vector<float> scores(const KpoolIndexerParams& p, const Cache& x, const std::vector<float>& q, const std::vector<float>& w,
                          int64_t s0, int64_t P, bool pooled) {
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.D)));
  std::vector<float> s(static_cast<size_t>(P), 0.0f), key(static_cast<size_t>(p.D));
  if (!pooled) {
    for (int64_t i = 0; i < P; ++i) {
      pooled_key(x, p.D, s0 + kKpoolSize * i, key.data());
      float sum = 0.0f;
      for (int64_t h = 0; h < p.H; ++h) {
        float dot = 0.0f;
        for (int64_t c = 0; c < p.D; ++c) dot += q[static_cast<size_t>(h * p.D + c)] * key[static_cast<size_t>(c)];
        dot = dot * scale;
        if (dot > 0.0f) sum += w[static_cast<size_t>(h)] * dot;
      }
      s[static_cast<size_t>(i)] = sum;
    }
    return s;
  }
  std::vector<float> keys(static_cast<size_t>(P * p.D));
  for (int64_t i = 0; i < P; ++i) pooled_key(x, p.D, s0 + kKpoolSize * i, keys.data() + i * p.D);
  constexpr int64_t kBlock = 64;
  for (int64_t i0 = 0; i0 < P; i0 += kBlock)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = i0; i < std::min(P, i0 + kBlock); ++i) {
        const float dot = indexer_cpu::dot4(q.data() + h * p.D, keys.data() + i * p.D, p.D) * scale;
        s[static_cast<size_t>(i)] += w[static_cast<size_t>(h)] * std::max(dot, 0.0f);
      }
  return s;
}

RunFn make(bool pooled) {
  return [pooled](const Case& c, const TensorMap& in, TensorMap& out) {
    const KpoolIndexerParams p = kpool_indexer_params(c);
    const std::string op = c.op();
    Cache x{std::vector<float>(static_cast<size_t>(p.L * p.D)), std::vector<float>(static_cast<size_t>(p.L * p.D)),
            std::vector<float>(static_cast<size_t>(kKpoolSize * p.D))};
    load_row(need(in, "k", op), 0, p.L * p.D, x.k.data());
    load_row(need(in, "gate", op), 0, p.L * p.D, x.gate.data());
    load_row(need(in, "ape", op), 0, kKpoolSize * p.D, x.ape.data());
    const int64_t S = p.slots();
    Tensor& ids = need_out(out, "indices", p.B * S, op);
    std::vector<float> q(static_cast<size_t>(p.H * p.D)), w(static_cast<size_t>(p.H));
    for (int64_t b = 0; b < p.B; ++b) {
      load_row(need(in, "q", op), b * p.H * p.D, p.H * p.D, q.data());
      load_row(need(in, "w", op), b * p.H, p.H, w.data());
      const int64_t s0 = static_cast<int64_t>(need(in, "start", op).get(b)), e = static_cast<int64_t>(need(in, "ctx", op).get(b));
      const int64_t P = (e - s0) / kKpoolSize;
      const std::vector<int64_t> sel = indexer_cpu::select_topk(scores(p, x, q, w, s0, P, pooled), p.topk, pooled);
      std::vector<double> row;
      if (pooled)
        for (int64_t t = s0 + kKpoolSize * P; t < e; ++t) row.push_back(static_cast<double>(t));
      for (int64_t i : sel)
        for (int64_t j = 0; j < kKpoolSize; ++j) row.push_back(static_cast<double>(s0 + kKpoolSize * i + j));
      if (!pooled)
        for (int64_t t = s0 + kKpoolSize * P; t < e; ++t) row.push_back(static_cast<double>(t));
      row.resize(static_cast<size_t>(S), -1.0);
      for (int64_t j = 0; j < S; ++j) ids.set(b * S + j, row[static_cast<size_t>(j)]);
    }
  };
}

}  // namespace

DG_REGISTER_CANDIDATE(kpool_indexer_cpu_naive_f32,
                      {"kpool_indexer_cpu_naive_f32", "kpool_indexer", "cpu", "naive", DType::f32, DType::f32, DType::f32,
                       "plain f32 loops: the pool softmax and key, dot, ReLU, weighted head sum, a full sort of the pools "
                       "(the policy's naive)"},
                      make(false));
DG_REGISTER_CANDIDATE(kpool_indexer_cpu_pooled_f32,
                      {"kpool_indexer_cpu_pooled_f32", "kpool_indexer", "cpu", "pooled", DType::f32, DType::f32, DType::f32,
                       "the production form in f32: a pooled-key cache, 64-pool blocks, 4-way partial dot sums, a partial "
                       "top-k (nth_element) with the tie rule; the tail first, pools by increasing index"},
                      make(true));

}  // namespace dg
