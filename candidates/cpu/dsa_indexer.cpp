// CPU candidates of dsa_indexer (reference/dsa_indexer.h), both in f32 as DeepGEMM's MQA-logits
// kernel accumulates its scores:
//   dsa_indexer_cpu_naive_f32     the policy's naive: plain loops. Per row and visible key, per head
//                                 the dot product over d ascending, ReLU, times the head weight
//                                 w_h * f32((H D)^-0.5), summed over h ascending; then every visible
//                                 key sorted by (score desc, index asc), the first min(topk, ctx) in
//                                 rank order, -1 after them
//   dsa_indexer_cpu_blocked_f32   the production form: keys in blocks of 64 against all heads, each dot
//                                 product in 4 interleaved partial sums (d mod 4) added pairwise, as a
//                                 vectorized kernel does; the selection by a partial top-k
//                                 (nth_element with the key (score desc, index asc), the tie rule),
//                                 the selected keys written in increasing index, as an unsorted
//                                 top-k may leave them, then the -1 sentinels
//   dsa_indexer_cpu_fp8_f32       DeepSeek-V3.2's FP8 path (without the Hadamard rotation): q per
//                                 (row, head) and k per key quantized to e4m3 with an f32 scale
//                                 amax / 448 (one 128-element block each), the dot products of the
//                                 e4m3 values in f32 (their products are exact) times both scales,
//                                 then the blocked candidate's head sum and partial top-k. Its
//                                 scores are off by up to ~2^-3 of sum |q k| (two e4m3 roundings), so
//                                 it misses keys near rank k: legitimately, within its bound
// All read q and k as f32 (exact for f32 and bf16 storage), write the ids (the harness allocates
// them in i32) and each selected key's f32 score (0 beside a -1).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "candidates/cpu/indexer_cpu.h"
#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/dsa_indexer.h"

namespace dg {
namespace {

struct RowInputs {
  std::vector<float> q, ws;   // [H,D] the row's queries, [H] the scaled head weights
};

RowInputs row_inputs(const DsaIndexerParams& p, const TensorMap& in, const std::string& op, int64_t b) {
  RowInputs r;
  r.q.resize(static_cast<size_t>(p.H * p.D));
  r.ws.resize(static_cast<size_t>(p.H));
  load_row(need(in, "q", op), b * p.H * p.D, p.H * p.D, r.q.data());
  load_row(need(in, "w", op), b * p.H, p.H, r.ws.data());
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.H * p.D)));
  for (float& x : r.ws) x = x * scale;
  return r;
}

std::vector<float> naive_scores(const DsaIndexerParams& p, const RowInputs& r, const std::vector<float>& k, int64_t n) {
  std::vector<float> s(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    float sum = 0.0f;
    for (int64_t h = 0; h < p.H; ++h) {
      float dot = 0.0f;
      for (int64_t d = 0; d < p.D; ++d) dot += r.q[static_cast<size_t>(h * p.D + d)] * k[static_cast<size_t>(t * p.D + d)];
      if (dot > 0.0f) sum += r.ws[static_cast<size_t>(h)] * dot;
    }
    s[static_cast<size_t>(t)] = sum;
  }
  return s;
}

std::vector<float> blocked_scores(const DsaIndexerParams& p, const RowInputs& r, const std::vector<float>& k, int64_t n) {
  constexpr int64_t kBlock = 64;
  std::vector<float> s(static_cast<size_t>(n), 0.0f);
  for (int64_t t0 = 0; t0 < n; t0 += kBlock)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t t = t0; t < std::min(n, t0 + kBlock); ++t) {
        const float dot = indexer_cpu::dot4(r.q.data() + h * p.D, k.data() + t * p.D, p.D);
        s[static_cast<size_t>(t)] += r.ws[static_cast<size_t>(h)] * std::max(dot, 0.0f);
      }
  return s;
}

// v [rows, D] quantized in place to e4m3 per row with the f32 scale amax / 448 (1 for a zero row);
// returns the scales.
std::vector<float> quantize_e4m3(std::vector<float>& v, int64_t rows, int64_t D) {
  std::vector<float> scale(static_cast<size_t>(rows), 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float* x = v.data() + r * D;
    float amax = 0.0f;
    for (int64_t d = 0; d < D; ++d) amax = std::max(amax, std::fabs(x[d]));
    if (amax > 0.0f) scale[static_cast<size_t>(r)] = amax / 448.0f;
    for (int64_t d = 0; d < D; ++d) x[d] = static_cast<float>(round_to(DType::e4m3, x[d] / scale[static_cast<size_t>(r)]));
  }
  return scale;
}

std::vector<float> fp8_scores(const DsaIndexerParams& p, RowInputs r, const std::vector<float>& k8, const std::vector<float>& ks,
                              int64_t n) {
  const std::vector<float> qs = quantize_e4m3(r.q, p.H, p.D);
  std::vector<float> s(static_cast<size_t>(n), 0.0f);
  for (int64_t h = 0; h < p.H; ++h)
    for (int64_t t = 0; t < n; ++t) {
      const float dot = indexer_cpu::dot4(r.q.data() + h * p.D, k8.data() + t * p.D, p.D) * (qs[static_cast<size_t>(h)] * ks[static_cast<size_t>(t)]);
      s[static_cast<size_t>(t)] += r.ws[static_cast<size_t>(h)] * std::max(dot, 0.0f);
    }
  return s;
}

enum class Form { naive, blocked, fp8 };

RunFn make(Form form) {
  return [form](const Case& c, const TensorMap& in, TensorMap& out) {
    const DsaIndexerParams p = dsa_indexer_params(c);
    const std::string op = c.op();
    const bool blocked = form != Form::naive;
    std::vector<float> k(static_cast<size_t>(p.L * p.D));
    load_row(need(in, "k", op), 0, p.L * p.D, k.data());
    const std::vector<float> ks = form == Form::fp8 ? quantize_e4m3(k, p.L, p.D) : std::vector<float>{};
    const Tensor& ctx = need(in, "ctx", op);
    Tensor& ids_t = need_out(out, "indices", p.B * p.topk, op);
    Tensor& s_t = need_out(out, "scores", p.B * p.topk, op);
    std::vector<float> row_s(static_cast<size_t>(p.topk));
    for (int64_t b = 0; b < p.B; ++b) {
      const int64_t n = static_cast<int64_t>(ctx.get(b));
      const RowInputs r = row_inputs(p, in, op, b);
      const std::vector<float> s = form == Form::fp8 ? fp8_scores(p, r, k, ks, n)
                                   : blocked         ? blocked_scores(p, r, k, n)
                                                     : naive_scores(p, r, k, n);
      const std::vector<int64_t> sel = indexer_cpu::select_topk(s, p.topk, blocked);
      std::fill(row_s.begin(), row_s.end(), 0.0f);
      for (int64_t j = 0; j < p.topk; ++j) {
        const bool used = j < static_cast<int64_t>(sel.size());
        ids_t.set(b * p.topk + j, used ? static_cast<double>(sel[static_cast<size_t>(j)]) : -1.0);
        if (used) row_s[static_cast<size_t>(j)] = s[static_cast<size_t>(sel[static_cast<size_t>(j)])];
      }
      store_row(s_t, b * p.topk, p.topk, row_s.data());
    }
  };
}

}  // namespace

DG_REGISTER_CANDIDATE(dsa_indexer_cpu_naive_f32,
                      {"dsa_indexer_cpu_naive_f32", "dsa_indexer", "cpu", "naive", DType::f32, DType::f32, DType::f32,
                       "plain f32 loops: dot, ReLU, weighted head sum per key, a full sort by (score desc, index asc) "
                       "(the policy's naive)"},
                      make(Form::naive));
DG_REGISTER_CANDIDATE(dsa_indexer_cpu_blocked_f32,
                      {"dsa_indexer_cpu_blocked_f32", "dsa_indexer", "cpu", "blocked", DType::f32, DType::f32, DType::f32,
                       "the production form in f32: 64-key blocks, 4-way partial dot sums, a partial top-k "
                       "(nth_element) with the tie rule; slots by increasing key"},
                      make(Form::blocked));
DG_REGISTER_CANDIDATE(dsa_indexer_cpu_fp8_f32,
                      {"dsa_indexer_cpu_fp8_f32", "dsa_indexer", "cpu", "fp8", DType::e4m3, DType::f32, DType::f32,
                       "DeepSeek-V3.2's FP8 path: q per head and k per key in e4m3 with f32 amax / 448 scales, f32 "
                       "dots times the scales, the blocked head sum and partial top-k"},
                      make(Form::fp8));

}  // namespace dg
