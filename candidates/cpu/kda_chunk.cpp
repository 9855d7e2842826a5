// kda_cpu_chunk_f32 and kda_cpu_chunk_bf16: KDA in the chunked WY/UT form (notes §2.1), chunk C = 64.
//
// Per (sequence, value head) pair, per chunk of c <= 64 tokens (the last one ragged), with q, k
// prepared as in the recurrent candidate, G_i = sum_{s<=i} g_s the chunk-local inclusive cumsum (per
// channel, f32, reset at every chunk) and gamma = G_{c-1}:
//
//   L_ij   = beta_i sum_d k_id k_jd exp(G_id - G_jd)            j < i     (gated key Gram)
//   Aqk_ij =        sum_d q_id k_jd exp(G_id - G_jd)            j <= i    (q carries scale)
//   Akk    = (I + L)^-1                                          forward substitution, row by row
//   W = Akk (beta k * exp(G)),  U = Akk (beta v)
//   V' = U - W S
//   O  = (q * exp(G)) S + Aqk V'
//   S <- diag(exp(gamma)) S + (k * exp(gamma - G))^T V'
//
// No positive exponent is ever formed: G is non-increasing along the chunk (g <= 0), so exp(G_i),
// exp(gamma - G_i) and, on the diagonal 16 x 16 blocks, exp(G_i - G_j) for j <= i all take arguments
// <= 0. The off-diagonal blocks (rows i in sub-block I, columns j in an earlier sub-block) factor
// through the first row r of sub-block I, as FLA's inter-block kernel does (notes §2.2):
//   exp(G_i - G_j) = exp(G_i - G_r) * exp(G_r - G_j),   i >= r > j, both arguments <= 0,
// which turns them into one GEMM per sub-block. A factor that underflows to 0 stands for a product
// that is below the f32 range as well, so strong decays (cumsums down to -320 and beyond) give
// zeros, never Inf or NaN.
//
// The f32 candidate keeps every intermediate in f32. The bf16 candidate emulates the storage of the
// production GPU pipeline (notes §2.2): q, k, v, g, beta read as bf16 (and q, k rounded again after
// the l2norm); Akk (the inverse), Aqk, W, U, V', q * exp(G), k * exp(gamma - G), (k beta) * exp(G)
// and v beta stored bf16; the f32 state consumed through a bf16 copy each chunk (for W S and the
// output); f32 accumulation everywhere; o rounded to bf16, ht in f32. Scale is applied to Aqk and to
// the (q * exp(G)) S product, as FLA's output kernel does.
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "candidates/cpu/kda_chunk.h"
#include "candidates/cpu/kda_cpu.h"
#include "harness/ops/kda_op.h"
#include "harness/registry.h"

namespace dg {
namespace kda_cpu {
namespace {

constexpr int64_t kChunk = 64;
constexpr int64_t kSub = 16;   // sub-block of the intra-chunk products

// Per-thread scratch of one (sequence, value head) pair; rows padded to a multiple of 16 with zeros.
struct ChunkScratch {
  int64_t K, V, Kp, Vp, KVp;
  Buffer S, Sb, Q, Kn, G, Vb, beta, Qg, KgT, Y, WU, Akk, Ainv, Aqk, Vn, Ob, X, BT, eg;
  ChunkScratch(int64_t K_, int64_t V_) : K(K_), V(V_), Kp(round_up16(K_)), Vp(round_up16(V_)), KVp(Kp + Vp) {
    auto mk = [](int64_t n) { return make_buffer(static_cast<size_t>(n)); };
    S = mk(K * Vp);   Sb = mk(K * Vp);
    Q = mk(kChunk * Kp);  Kn = mk(kChunk * Kp);  G = mk(kChunk * Kp);  Vb = mk(kChunk * Vp);
    beta = mk(kChunk);    Qg = mk(kChunk * Kp);  KgT = mk(Kp * kChunk);
    Y = mk(kChunk * KVp); WU = mk(kChunk * KVp);
    Akk = mk(kChunk * kChunk);  Ainv = mk(kChunk * kChunk);  Aqk = mk(kChunk * kChunk);
    Vn = mk(kChunk * Vp); Ob = mk(kChunk * Vp);
    X = mk(2 * kSub * Kp);  BT = mk(Kp * kChunk);  eg = mk(Kp);
  }
};

template <bool kBf16>
inline float st(float x) { return kBf16 ? round_bf16(x) : x; }

template <bool kBf16>
inline void st_row(float* x, int64_t n) {
  if constexpr (kBf16)
    for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

// Aqk (lower, diagonal included) and L = beta_i (k_i . k_j) (strictly lower) of a chunk of c rows.
template <bool kBf16>
void intra_chunk(ChunkScratch& w, int64_t c, float scale) {
  const int64_t Kp = w.Kp;
  const float *Q = w.Q.get(), *Kn = w.Kn.get(), *G = w.G.get(), *beta = w.beta.get();
  float *Akk = w.Akk.get(), *Aqk = w.Aqk.get();
  std::memset(Akk, 0, sizeof(float) * kChunk * kChunk);
  std::memset(Aqk, 0, sizeof(float) * kChunk * kChunk);
  const float qscale = kBf16 ? scale : 1.0f;   // the f32 candidate folded scale into q
  for (int64_t b0 = 0; b0 < c; b0 += kSub) {
    const int64_t b1 = std::min(c, b0 + kSub), mi = b1 - b0;
    // Diagonal block: exp(G_i - G_j), j <= i, element by element.
    for (int64_t i = b0; i < b1; ++i)
      for (int64_t j = b0; j <= i; ++j) {
        V16 aq = V16::zero(), ak = V16::zero();
        for (int64_t d = 0; d < Kp; d += 16) {
          const V16 kj = V16::load(Kn + j * Kp + d) * exp16(V16::load(G + i * Kp + d) - V16::load(G + j * Kp + d));
          aq = fma(V16::load(Q + i * Kp + d), kj, aq);
          ak = fma(V16::load(Kn + i * Kp + d), kj, ak);
        }
        Aqk[i * kChunk + j] = st<kBf16>(hsum(aq) * qscale);
        if (j < i) Akk[i * kChunk + j] = hsum(ak) * beta[i];
      }
    if (b0 == 0) continue;
    // Off-diagonal blocks: rows [b0, b1) against columns [0, b0), through reference row r = b0.
    const int64_t r = b0;
    float *X = w.X.get(), *BT = w.BT.get();
    for (int64_t i = b0; i < b1; ++i)
      for (int64_t d = 0; d < Kp; d += 16) {
        const V16 e = exp16(V16::load(G + i * Kp + d) - V16::load(G + r * Kp + d));
        (V16::load(Q + i * Kp + d) * e).store(X + (i - b0) * Kp + d);
        (V16::load(Kn + i * Kp + d) * e).store(X + (mi + i - b0) * Kp + d);
      }
    alignas(64) float col[16];
    for (int64_t j = 0; j < r; ++j)
      for (int64_t d = 0; d < Kp; d += 16) {
        (V16::load(Kn + j * Kp + d) * exp16(V16::load(G + r * Kp + d) - V16::load(G + j * Kp + d))).store(col);
        for (int l = 0; l < 16; ++l) BT[(d + l) * kChunk + j] = col[l];
      }
    gemm(2 * mi, r, w.K, X, Kp, BT, kChunk, false, [&](int64_t ii, int64_t j, V16 acc) {
      alignas(64) float s[16];
      acc.store(s);
      if (ii < mi) {
        for (int l = 0; l < 16; ++l) Aqk[(b0 + ii) * kChunk + j + l] = st<kBf16>(s[l] * qscale);
      } else {
        const int64_t i = b0 + ii - mi;
        for (int l = 0; l < 16; ++l) Akk[i * kChunk + j + l] = s[l] * beta[i];
      }
    });
  }
}

// Ainv = (I + L)^-1 by forward substitution: row i = e_i - sum_{j<i} L_ij row j (j ascending).
template <bool kBf16>
void invert_unit_lower(ChunkScratch& w, int64_t c) {
  const float* L = w.Akk.get();
  float* X = w.Ainv.get();
  std::memset(X, 0, sizeof(float) * kChunk * kChunk);
  for (int64_t i = 0; i < c; ++i) {
    float* xi = X + i * kChunk;
    for (int64_t j = 0; j < i; ++j) {   // row j is zero beyond column j
      const V16 lij = V16::set1(-L[i * kChunk + j]);
      const float* xj = X + j * kChunk;
      for (int64_t m = 0; m < round_up16(j + 1); m += 16)
        fma(lij, V16::load(xj + m), V16::load(xi + m)).store(xi + m);
    }
    xi[i] = 1.0f;
  }
  if constexpr (kBf16)
    for (int64_t i = 0; i < c; ++i) st_row<true>(X + i * kChunk, i);
}

template <bool kBf16>
void chunk_pair(const KdaParams& p, const TensorMap& in, const Tensor* h0, Tensor& o, Tensor& ht, int64_t n,
                int64_t hv, ChunkScratch& w) {
  const int64_t K = p.K, V = p.V, HV = p.HV, Kp = w.Kp, Vp = w.Vp, KVp = w.KVp;
  const float scale = static_cast<float>(p.scale_value());
  float *S = w.S.get(), *Q = w.Q.get(), *Kn = w.Kn.get(), *G = w.G.get(), *Vb = w.Vb.get(), *beta = w.beta.get();
  float *Qg = w.Qg.get(), *KgT = w.KgT.get(), *Y = w.Y.get(), *WU = w.WU.get(), *Vn = w.Vn.get();
  float *Ob = w.Ob.get(), *eg = w.eg.get();
  const float* Sb = kBf16 ? w.Sb.get() : S;
  if (h0) load_state(*h0, n, hv, p, S, Vp);
  else std::fill(S, S + K * Vp, 0.0f);
  TokenReader reader(p, in, hv, /*fold_scale=*/!kBf16, /*bf16_storage=*/kBf16);

  for (int64_t t0 = p.seq_begin(n); t0 < p.seq_end(n); t0 += kChunk) {
    const int64_t c = std::min(kChunk, p.seq_end(n) - t0);
    // Rows in, then the chunk-local inclusive cumsum of g.
    for (int64_t i = 0; i < c; ++i)
      beta[i] = reader.load(t0 + i, Q + i * Kp, Kn + i * Kp, Vb + i * Vp, G + i * Kp);
    for (int64_t i = 1; i < c; ++i)
      for (int64_t d = 0; d < K; ++d) G[i * Kp + d] += G[(i - 1) * Kp + d];
    const float* gamma = G + (c - 1) * Kp;

    // Gated copies: q exp(G), (k beta) exp(G), v beta, (k exp(gamma - G))^T, exp(gamma).
    for (int64_t i = 0; i < c; ++i) {
      const V16 b = V16::set1(beta[i]);
      alignas(64) float col[16];
      for (int64_t d = 0; d < Kp; d += 16) {
        const V16 gi = V16::load(G + i * Kp + d), e = exp16(gi);
        (V16::load(Q + i * Kp + d) * e).store(Qg + i * Kp + d);
        ((V16::load(Kn + i * Kp + d) * b) * e).store(Y + i * KVp + d);
        (V16::load(Kn + i * Kp + d) * exp16(V16::load(gamma + d) - gi)).store(col);
        for (int l = 0; l < 16; ++l) KgT[(d + l) * kChunk + i] = st<kBf16>(col[l]);
      }
      for (int64_t j = 0; j < Vp; j += 16) (V16::load(Vb + i * Vp + j) * b).store(Y + i * KVp + Kp + j);
      st_row<kBf16>(Qg + i * Kp, Kp);
      st_row<kBf16>(Y + i * KVp, KVp);
    }
    for (int64_t d = 0; d < Kp; d += 16) exp16(V16::load(gamma + d)).store(eg + d);

    // Intra-chunk products, the inverse, then W and U in one GEMM: [W | U] = Ainv [(k beta) exp(G) | v beta].
    intra_chunk<kBf16>(w, c, scale);
    invert_unit_lower<kBf16>(w, c);
    gemm(c, KVp, c, w.Ainv.get(), kChunk, Y, KVp, true, [&](int64_t i, int64_t j, V16 acc) {
      float* dst = WU + i * KVp + j;
      acc.store(dst);
      st_row<kBf16>(dst, 16);
    });

    // The state as consumed this chunk (bf16: a rounded copy), V' = U - W S, O = (q exp G) S + Aqk V'.
    if constexpr (kBf16)
      for (int64_t x = 0; x < K * Vp; ++x) w.Sb[static_cast<size_t>(x)] = round_bf16(S[x]);
    gemm(c, Vp, K, WU, KVp, Sb, Vp, false, [&](int64_t i, int64_t j, V16 acc) {
      float* dst = Vn + i * Vp + j;
      (V16::load(WU + i * KVp + Kp + j) - acc).store(dst);
      st_row<kBf16>(dst, 16);
    });
    const V16 oscale = V16::set1(kBf16 ? scale : 1.0f);
    gemm(c, Vp, K, Qg, Kp, Sb, Vp, false,
         [&](int64_t i, int64_t j, V16 acc) { (acc * oscale).store(Ob + i * Vp + j); });
    gemm(c, Vp, c, w.Aqk.get(), kChunk, Vn, Vp, true, [&](int64_t i, int64_t j, V16 acc) {
      float* dst = Ob + i * Vp + j;
      (V16::load(dst) + acc).store(dst);
    });
    for (int64_t i = 0; i < c; ++i) {
      st_row<kBf16>(Ob + i * Vp, V);
      store_row(o, ((t0 + i) * HV + hv) * V, V, Ob + i * Vp);
    }

    // S <- diag(exp(gamma)) S + (k exp(gamma - G))^T V'.
    for (int64_t d = 0; d < K; ++d) {
      const V16 e = V16::set1(eg[d]);
      for (int64_t j = 0; j < Vp; j += 16) (V16::load(S + d * Vp + j) * e).store(S + d * Vp + j);
    }
    gemm(K, Vp, c, KgT, kChunk, Vn, Vp, false, [&](int64_t i, int64_t j, V16 acc) {
      float* dst = S + i * Vp + j;
      (V16::load(dst) + acc).store(dst);
    });
  }
  store_state(ht, n, hv, p, S, Vp);
}

template <bool kBf16>
void kda_chunk(const KdaParams& p, const TensorMap& in, TensorMap& out) {
  const int64_t HV = p.HV, N = p.num_seqs();
  Tensor& o = output(out, "o", p.B * p.T * HV * p.V);
  Tensor& ht = output(out, "ht", N * HV * p.K * p.V);
  const Tensor* h0 = nullptr;
  if (p.has_h0) {
    auto it = in.find("h0");
    if (it == in.end()) throw std::invalid_argument("kda: input tensor 'h0' is missing");
    h0 = &it->second;
  }
  const double flops_per_pair = p.flops_per_token_head() * static_cast<double>(p.B * p.T) / static_cast<double>(N);
  for_each_pair(
      N * HV, flops_per_pair, [&] { return ChunkScratch(p.K, p.V); },
      [&](int64_t pair, ChunkScratch& w) { chunk_pair<kBf16>(p, in, h0, o, ht, pair / HV, pair % HV, w); });
}

}  // namespace
}  // namespace kda_cpu

void kda_cpu_chunk_f32(const KdaParams& p, const TensorMap& in, TensorMap& out) {
  kda_cpu::kda_chunk<false>(p, in, out);
}

void kda_cpu_chunk_bf16(const KdaParams& p, const TensorMap& in, TensorMap& out) {
  kda_cpu::kda_chunk<true>(p, in, out);
}

DG_REGISTER_CANDIDATE(kda_cpu_chunk_f32,
                      CandidateInfo{"kda_cpu_chunk_f32", "kda", "cpu", "chunk", DType::f32, DType::f32, DType::f32,
                                    "chunked WY/UT form, C = 64, f32 throughout (notes §2.1)"},
                      [](const Case& c, const TensorMap& in, TensorMap& out) {
                        kda_cpu_chunk_f32(kda_params(c), in, out);
                      });

DG_REGISTER_CANDIDATE(kda_cpu_chunk_bf16,
                      CandidateInfo{"kda_cpu_chunk_bf16", "kda", "cpu", "chunk", DType::bf16, DType::f32, DType::bf16,
                                    "chunked WY/UT form with the GPU pipeline's bf16 storage (notes §2.2); ht f32"},
                      [](const Case& c, const TensorMap& in, TensorMap& out) {
                        kda_cpu_chunk_bf16(kda_params(c), in, out);
                      });

}  // namespace dg
