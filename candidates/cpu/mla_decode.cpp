// CPU candidates of mla_decode (reference/mla_decode.h). Both gather a sequence's keys (its tokens,
// or the valid entries of its index row, in order) as latent rows k [n, d_c+rope] and values
// v [n, d_c], scores s = fl32(q.k) * scale with the dot product over [q~ | q_pe] summed in f32 in
// increasing i, and write o~ and lse in f32 (no key: o~ = 0, lse = -inf):
//   mla_decode_cpu_naive_f32   the policy's naive: attention_decode's plain two-pass f32 softmax per
//                              head (candidates/cpu/attention_decode_cpu.h naive_row) over the
//                              gathered keys as one page: one sequential f32 sum of l and acc in
//                              increasing key order. (Not attention_decode's per-page partials: they
//                              keep 21.5 bits at 32K, past the split-KV row that every mla mutant
//                              and equivalent is built on, candidates/mutants/mla_decode.cpp, when
//                              that row summed token by token, and the limit max(1.5 x base,
//                              2 x naive) then rejected the token-wise equivalents, 2.5x the packed
//                              base's error at 1000 f16 keys, at 8 of 10 seeds. The row now sums
//                              per page tile; per-page partials here are not re-measured.)
//   mla_decode_cpu_packed_f32  the production form (FlashMLA's decode kernel): heads packed, each
//                              latent row read once for all n_h heads; the keys split `split` ways
//                              by pages (split s covers the keys [s ceil(n/page/split) page, ...));
//                              per split, blocks of 64 keys: S = Q K^T for all heads, one max per
//                              block and head (m_new = max(m, max_t S), acc and l rescaled once by
//                              exp(m - m_new)), P = exp(S - m_new) in f32, l += the block's P in
//                              increasing t, acc += P V token by token; o_p = acc / l, lse_p =
//                              m + ln l (an empty split: 0, -inf); then attention_decode's LSE merge
// P stays f32: FlashMLA rounds P to bf16 for its bf16-output MMA, which against these f32 outputs
// throws away 10-12 bits (attention_decode's p_bf16 mutant).
#include <algorithm>
#include <cmath>
#include <vector>

#include "candidates/cpu/attention_decode_cpu.h"
#include "candidates/cpu/mla_decode_cpu.h"
#include "harness/cases/registry.h"

namespace dg {
namespace {

using attention_cpu::kNegInf;
using mla_cpu::View;
constexpr int64_t kBlock = 64;

struct Split {   // the running state of every head over one split
  std::vector<float> m, l, acc;   // [n_h], [n_h], [n_h, d_c]
};

// One block of keys [t0, t1) for every head: the block max, the rescale, P and the PV sum.
void block(const View& w, const std::vector<float>& Q, int64_t t0, int64_t t1, const std::vector<float>& k,
           const std::vector<float>& v, Split& st) {
  const int64_t D = w.p.width(), dc = w.p.d_c, nb = t1 - t0, H = w.p.n_h;
  std::vector<float> P(static_cast<size_t>(H * nb));
  for (int64_t h = 0; h < H; ++h) {
    float* ph = P.data() + h * nb;
    float mb = kNegInf, sum = 0.0f;
    for (int64_t t = 0; t < nb; ++t)
      mb = std::max(mb, ph[t] = attention_cpu::dot(Q.data() + h * D, k.data() + (t0 + t) * D, D) * w.a.scale);
    const float m_new = std::max(st.m[static_cast<size_t>(h)], mb), alpha = std::exp(st.m[static_cast<size_t>(h)] - m_new);
    for (int64_t t = 0; t < nb; ++t) sum = sum + (ph[t] = std::exp(ph[t] - m_new));
    st.l[static_cast<size_t>(h)] = st.l[static_cast<size_t>(h)] * alpha + sum;
    st.m[static_cast<size_t>(h)] = m_new;
    for (int64_t c = 0; c < dc; ++c) st.acc[static_cast<size_t>(h * dc + c)] = st.acc[static_cast<size_t>(h * dc + c)] * alpha;
  }
  for (int64_t t = 0; t < nb; ++t) {   // each latent row once, for all heads
    const float* vt = v.data() + (t0 + t) * dc;
    for (int64_t h = 0; h < H; ++h) {
      const float pt = P[static_cast<size_t>(h * nb + t)];
      float* acc = st.acc.data() + h * dc;
      for (int64_t c = 0; c < dc; ++c) acc[c] = acc[c] + pt * vt[c];
    }
  }
}

// Split s of every head over keys [j0, j1): os [n_h, split, d_c] and ls [n_h, split] at s.
void packed_split(const View& w, int64_t split, int64_t s, const std::vector<float>& Q, int64_t j0, int64_t j1,
                  const std::vector<float>& k, const std::vector<float>& v, std::vector<float>& os, std::vector<float>& ls) {
  const int64_t H = w.p.n_h, dc = w.p.d_c;
  Split st{std::vector<float>(static_cast<size_t>(H), kNegInf), std::vector<float>(static_cast<size_t>(H), 0.0f),
           std::vector<float>(static_cast<size_t>(H * dc), 0.0f)};
  for (int64_t t0 = j0; t0 < j1; t0 += kBlock) block(w, Q, t0, std::min(j1, t0 + kBlock), k, v, st);
  for (int64_t h = 0; h < H; ++h) {
    float* o = os.data() + (h * split + s) * dc;
    for (int64_t c = 0; c < dc; ++c) o[c] = j1 > j0 ? st.acc[static_cast<size_t>(h * dc + c)] / st.l[static_cast<size_t>(h)] : 0.0f;
    ls[static_cast<size_t>(h * split + s)] = j1 > j0 ? st.m[static_cast<size_t>(h)] + std::log(st.l[static_cast<size_t>(h)]) : kNegInf;
  }
}

void packed(const View& w, int64_t split, int64_t b, int64_t n, const std::vector<float>& k, const std::vector<float>& v,
            TensorMap& out) {
  const int64_t H = w.p.n_h, dc = w.p.d_c, D = w.p.width();
  std::vector<float> Q(static_cast<size_t>(H * D));
  for (int64_t h = 0; h < H; ++h) {
    const std::vector<float> q = mla_cpu::query(w, b, h);
    std::copy(q.begin(), q.end(), Q.begin() + h * D);
  }
  const int64_t span = attention_decode_pages_per_split((n + w.p.page - 1) / w.p.page, split) * w.p.page;
  std::vector<float> os(static_cast<size_t>(H * split * dc)), ls(static_cast<size_t>(H * split));
  for (int64_t s = 0; s < split; ++s) packed_split(w, split, s, Q, std::min(n, s * span), std::min(n, (s + 1) * span), k, v, os, ls);
  std::vector<float> o(static_cast<size_t>(dc));
  for (int64_t h = 0; h < H; ++h) {
    const std::vector<float> osh(os.begin() + h * split * dc, os.begin() + (h + 1) * split * dc),
        lsh(ls.begin() + h * split, ls.begin() + (h + 1) * split);
    float lse = 0.0f;
    attention_cpu::merge(split, dc, osh, lsh, *std::max_element(lsh.begin(), lsh.end()), o, lse);
    mla_cpu::store(out, w, b, h, o, lse);
  }
}

RunFn make(bool production) {
  return [production](const Case& c, const TensorMap& in, TensorMap& out) {
    const View w = mla_cpu::view(c, in);
    std::vector<float> k, v, o(static_cast<size_t>(w.p.d_c));
    for (int64_t b = 0; b < w.p.B; ++b) {
      const std::vector<int64_t> keys = mla_decode_keys(w.p, b, w.lens, w.indices);
      const int64_t n = static_cast<int64_t>(keys.size());
      mla_cpu::gather(w, keys, b, k, v);
      if (production) {
        packed(w, c.integer("split"), b, n, k, v, out);
        continue;
      }
      AttentionDecodeParams whole = w.a;   // one page of every key: one sequential f32 sum (see the top)
      whole.page = std::max<int64_t>(n, 1);
      for (int64_t h = 0; h < w.p.n_h; ++h) {
        float lse = 0.0f;
        attention_cpu::naive_row(whole, mla_cpu::query(w, b, h), n, k, v, o, lse);
        mla_cpu::store(out, w, b, h, o, lse);
      }
    }
  };
}

}  // namespace

DG_REGISTER_CANDIDATE(mla_decode_cpu_naive_f32,
                      {"mla_decode_cpu_naive_f32", "mla_decode", "cpu", "naive", DType::f32, DType::f32, DType::f32,
                       "plain two-pass softmax in f32 per head over the gathered latent rows, one sequential sum (the policy's naive)"},
                      make(false));
DG_REGISTER_CANDIDATE(mla_decode_cpu_packed_f32,
                      {"mla_decode_cpu_packed_f32", "mla_decode", "cpu", "packed", DType::f32, DType::f32, DType::f32,
                       "FlashMLA's form: heads packed (each latent row read once), split-KV, blocks of 64 keys with one "
                       "max and rescale per block, f32 P and acc, the LSE merge"},
                      make(true));

}  // namespace dg
