// CPU candidates of attention_decode (reference/attention_decode.h). Per (b, h), scores s_j =
// fl32(q.k) * scale with the dot product summed in f32 in increasing i, then:
//   attention_decode_cpu_naive_f32    the policy's naive: plain two-pass softmax in f32: m = max s_j;
//                                     p_j = exp(s_j - m), l = sum p_j and acc = sum p_j v_j in
//                                     increasing j; o = acc / l, lse = m + ln l
//   attention_decode_cpu_splitkv_f32  flash-decoding, the production form (FlashAttention's
//                                     num_splits, FlashInfer's merge_state, vLLM PagedAttention v2):
//                                     the sequence's pages split `split` ways (split s covers pages
//                                     [s ceil(n/split), (s+1) ceil(n/split))); per split an online
//                                     softmax with f32 m, l and accumulator (acc *= exp(m_old - m_new)
//                                     when the max moves), o_p = acc / l and lse_p = m + ln l, or
//                                     o_p = 0, lse_p = -inf for a split with no keys; then the LSE
//                                     merge M = max lse_p, w_p = exp(lse_p - M), o = sum w_p o_p /
//                                     sum w_p, lse = M + ln sum w_p (M = -inf: o = 0, lse = -inf)
// Both write o and lse in f32; an empty context gives o = 0 and lse = -inf.
#include <cmath>
#include <limits>
#include <vector>

#include "candidates/cpu/attention_decode_cpu.h"
#include "harness/cases/registry.h"

namespace dg {
namespace {

using attention_cpu::View;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc = acc + a[i] * b[i];
  return acc;
}

void naive_row(const View& w, const std::vector<float>& q, int64_t L, const std::vector<float>& k,
               const std::vector<float>& v, std::vector<float>& o, float& lse) {
  const int64_t d = w.p.d, dv = w.p.dv;
  std::vector<float> s(static_cast<size_t>(L));
  float m = kNegInf;
  for (int64_t j = 0; j < L; ++j) m = std::max(m, s[static_cast<size_t>(j)] = dot(q.data(), k.data() + j * d, d) * w.p.scale);
  std::vector<float> acc(static_cast<size_t>(dv), 0.0f);
  float l = 0.0f;
  for (int64_t j = 0; j < L; ++j) {
    const float e = std::exp(s[static_cast<size_t>(j)] - m);
    l = l + e;
    for (int64_t c = 0; c < dv; ++c) acc[static_cast<size_t>(c)] = acc[static_cast<size_t>(c)] + e * v[static_cast<size_t>(j * dv + c)];
  }
  for (int64_t c = 0; c < dv; ++c) o[static_cast<size_t>(c)] = L ? acc[static_cast<size_t>(c)] / l : 0.0f;
  lse = L ? m + std::log(l) : kNegInf;
}

// One split's online softmax over tokens [j0, j1): o_p (normalised) and lse_p.
void split_state(const View& w, const std::vector<float>& q, int64_t j0, int64_t j1, const std::vector<float>& k,
                 const std::vector<float>& v, float* o, float& lse) {
  const int64_t d = w.p.d, dv = w.p.dv;
  float m = kNegInf, l = 0.0f;
  std::vector<float> acc(static_cast<size_t>(dv), 0.0f);
  for (int64_t j = j0; j < j1; ++j) {
    const float s = dot(q.data(), k.data() + j * d, d) * w.p.scale;
    const float m_new = std::max(m, s), alpha = std::exp(m - m_new), e = std::exp(s - m_new);
    l = l * alpha + e;
    for (int64_t c = 0; c < dv; ++c)
      acc[static_cast<size_t>(c)] = acc[static_cast<size_t>(c)] * alpha + e * v[static_cast<size_t>(j * dv + c)];
    m = m_new;
  }
  for (int64_t c = 0; c < dv; ++c) o[c] = j1 > j0 ? acc[static_cast<size_t>(c)] / l : 0.0f;   // the -inf guard
  lse = j1 > j0 ? m + std::log(l) : kNegInf;
}

void splitkv_row(const View& w, int64_t split, const std::vector<float>& q, int64_t L, const std::vector<float>& k,
                 const std::vector<float>& v, std::vector<float>& o, float& lse) {
  const int64_t dv = w.p.dv, pages = (L + w.p.page - 1) / w.p.page;
  const int64_t span = attention_decode_pages_per_split(pages, split) * w.p.page;
  std::vector<float> os(static_cast<size_t>(split * dv)), ls(static_cast<size_t>(split));
  float M = kNegInf;
  for (int64_t s = 0; s < split; ++s) {
    split_state(w, q, std::min(L, s * span), std::min(L, (s + 1) * span), k, v, os.data() + s * dv, ls[static_cast<size_t>(s)]);
    M = std::max(M, ls[static_cast<size_t>(s)]);
  }
  std::fill(o.begin(), o.end(), 0.0f);
  if (M == kNegInf) {   // no keys at all
    lse = kNegInf;
    return;
  }
  float wsum = 0.0f;
  for (int64_t s = 0; s < split; ++s) {
    const float ws = std::exp(ls[static_cast<size_t>(s)] - M);
    wsum = wsum + ws;
    for (int64_t c = 0; c < dv; ++c) o[static_cast<size_t>(c)] = o[static_cast<size_t>(c)] + ws * os[static_cast<size_t>(s * dv + c)];
  }
  for (float& x : o) x = x / wsum;
  lse = M + std::log(wsum);
}

RunFn make(bool splitkv) {
  return [splitkv](const Case& c, const TensorMap& in, TensorMap& out) {
    const View w = attention_cpu::view(c, in);
    const int64_t split = c.integer("split");
    std::vector<float> k, v, o(static_cast<size_t>(w.p.dv));
    for (int64_t b = 0; b < w.p.B; ++b)
      for (int64_t g = 0; g < w.p.n_kv; ++g) {
        const int64_t L = w.lens[static_cast<size_t>(b)];
        attention_cpu::gather(w, b, g, L, k, v);
        for (int64_t h = g * w.group(); h < (g + 1) * w.group(); ++h) {
          const std::vector<float> q = attention_cpu::query(w, b, h);
          float lse = 0.0f;
          if (splitkv) splitkv_row(w, split, q, L, k, v, o, lse);
          else naive_row(w, q, L, k, v, o, lse);
          attention_cpu::store(out, w, b, h, o, lse);
        }
      }
  };
}

}  // namespace

DG_REGISTER_CANDIDATE(attention_decode_cpu_naive_f32,
                      {"attention_decode_cpu_naive_f32", "attention_decode", "cpu", "naive", DType::f32, DType::f32, DType::f32,
                       "plain two-pass softmax in f32: max, then exp(s - m) summed with the weighted V sum (the policy's naive)"},
                      make(false));
DG_REGISTER_CANDIDATE(attention_decode_cpu_splitkv_f32,
                      {"attention_decode_cpu_splitkv_f32", "attention_decode", "cpu", "splitkv", DType::f32, DType::f32, DType::f32,
                       "flash-decoding: online softmax per split (f32 m, l, acc), the LSE merge of the splits, -inf guarded"},
                      make(true));

}  // namespace dg
