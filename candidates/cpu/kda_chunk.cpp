// kda_cpu_chunk_f32 and kda_cpu_chunk_bf16: KDA in the chunked WY/UT form (notes §2.1), chunk C = 64.
//
// Per (sequence, value head) pair, per chunk of c <= 64 tokens (the last one ragged), with q, k
// prepared as in the recurrent candidate, G_i = sum_{s<=i} g_s the chunk-local inclusive cumsum (per
// channel, reset at every chunk) and gamma = G_{c-1}:
//
//   L_ij   = beta_i sum_d k_id k_jd exp(G_id - G_jd)            j < i     (gated key Gram)
//   Aqk_ij =        sum_d q_id k_jd exp(G_id - G_jd)            j <= i    (q carries scale)
//   Akk    = (I + L)^-1                                          forward substitution, row by row
//   W = Akk (beta k * exp(G)),  U = Akk (beta v)
//   V' = U - W S
//   O  = (q * exp(G)) S + Aqk V'
//   S <- diag(exp(gamma)) S + (k * exp(gamma - G))^T V'
//
// No positive exponent is ever formed (for g <= 0, which every gate mode produces; a pregated g is
// taken as given): G is non-increasing along the chunk, so exp(G_i) and exp(gamma - G_i) take
// arguments <= 0, and so does exp(G_i - G_j) for j <= i. Each 16-row sub-block I of the chunk gets:
//   - its two 8 x 8 diagonal triangles element by element, exp(G_i - G_j) per pair;
//   - the 8 x 8 square between them, and the columns of all earlier sub-blocks, by factoring through
//     a reference row r with i >= r > j (the square's middle row; the sub-block's first row), as
//     FLA's inter-block kernel does (notes §2.2):
//       exp(G_i - G_j) = exp(G_i - G_r) * exp(G_r - G_j),   both arguments <= 0,
//     which makes them dot products and one GEMM per sub-block.
// A factor that underflows to 0 stands for a product below the f32 range as well, so strong decays
// (cumsums down to -320 and far beyond) give zeros, never Inf or NaN.
//
// Speed: the three K x V products per chunk (W S and (q exp G) S as one GEMM of 2c rows, and the
// state update) and [W | U] = Ainv [...] run through kda_chunk.h's register-blocked GEMM; everything
// else is 16-lane vector code with the vector exp of kda_chunk.h.
//
// The f32 candidate keeps every intermediate in f32, and G as the unevaluated sum of two f32 (the
// cumsum and its rounding errors, TwoSum): exp(G_i - G_j) from two cumsums in one f32 each loses
// |G| 2^-24 to cancellation, which past a burst of forgetting (g = -960, then ordinary decays: the
// forget_burst regime) cost the kernel 6 bits (16.2 against the recurrent kernel's 21.7). The bf16
// candidate emulates the storage of the
// production GPU pipeline (notes §2.2): q, k, v, g, beta read as bf16 (and q, k rounded again after
// the l2norm); Akk (the inverse), Aqk, W, U, V', q * exp(G), k * exp(gamma - G), (k beta) * exp(G)
// and v beta stored bf16; the f32 state consumed through a bf16 copy each chunk (for W S and the
// output); f32 accumulation everywhere; o rounded to bf16, ht in f32. Scale is applied to Aqk and to
// the (q * exp(G)) S product, as FLA's output kernel does.
#include <cmath>
#include <cstring>
#include <stdexcept>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "candidates/cpu/kda_chunk.h"
#include "candidates/cpu/kda_cpu.h"
#include "harness/ops/kda.h"
#include "harness/cases/registry.h"

namespace dg {
namespace kda_cpu {
namespace {

// Subnormal f32 values are flushed to zero (FTZ) and read as zero (DAZ) while a chunk pair runs,
// as the production GPU kernels do (ex2.approx.ftz): chunk-local decays exp(Gamma_i - Gamma_j) of
// strongly decaying gates land in the subnormal range, where x86 arithmetic is tens of times
// slower, and their contribution (below 2^-126 relative) is far below f32 rounding of the outputs.
// The caller's MXCSR is restored afterwards.
class FlushSubnormals {
 public:
#if defined(__x86_64__)
  FlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }   // FTZ (bit 15) | DAZ (bit 6)
  ~FlushSubnormals() { _mm_setcsr(saved_); }
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
  unsigned saved_;
#endif
};

constexpr int64_t kChunk = 64;
constexpr int64_t kSub = 16;   // sub-block of the intra-chunk products
constexpr int64_t kHalf = 8;   // split of a diagonal sub-block

// Per-thread scratch of one (sequence, value head) pair, or of a range of its columns: V is the
// range's width (Vp rounded up to 16), Vfull the head's (for the row of v a token read fills). Rows
// padded to a multiple of 16 with zeros.
struct ChunkScratch {
  int64_t K, V, Kp, Vp, KVp;
  Buffer S, Sb, Q, Kn, G, Gl, Rs, Vb, beta, Y, WQ, U, Kg, Akk, Ainv, Aqk, Vn, Ob, X, XT, R, pack, eg, vrow;
  ChunkScratch(int64_t K_, int64_t V_, int64_t Vfull)
      : K(K_), V(V_), Kp(round_up16(K_)), Vp(round_up16(V_)), KVp(Kp + Vp) {
    auto mk = [](int64_t n) { return make_buffer(static_cast<size_t>(n)); };
    vrow = mk(round_up16(Vfull));
    S = mk(K * Vp);   Sb = mk(K * Vp);
    Q = mk(kChunk * Kp);  Kn = mk(kChunk * Kp);  G = mk(kChunk * Kp);  Gl = mk(kChunk * Kp);  Rs = mk(kChunk * Kp);  Vb = mk(kChunk * Vp);  beta = mk(kChunk);
    Y = mk(kChunk * KVp);  WQ = mk(2 * kChunk * Kp);  U = mk(kChunk * Vp);  Kg = mk(kChunk * Kp);
    Akk = mk(kChunk * kChunk);  Ainv = mk(kChunk * kChunk);  Aqk = mk(kChunk * kChunk);
    Vn = mk(kChunk * Vp);  Ob = mk(kChunk * Vp);
    X = mk(2 * kSub * Kp);  XT = mk(Kp * 2 * kSub);  R = mk(kChunk * Kp);
    pack = mk(std::max(Kp, kChunk) * 32);  eg = mk(Kp);
  }
};

template <bool kBf16>
inline float st(float x) { return kBf16 ? dg::round_bf16(x) : x; }

template <bool kBf16>
inline void st_row(float* x, int64_t n) {
  if constexpr (kBf16) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) round_bf16(V16::load(x + i)).store(x + i);
    for (; i < n; ++i) x[i] = dg::round_bf16(x[i]);
  }
}

inline V16 ld(const float* p) { return V16::load(p); }

// G_a - G_b of the cumsum rows a and b (16 channels from d): with kComp, G is the unevaluated sum
// of its rounded row G and its error row Gl (the f32 candidate), so the difference keeps f32
// precision when both are large (G_a - G_b of two rows near -960 is exact by Sterbenz, and the
// errors are added after); else G alone, as production forms it.
template <bool kComp>
inline V16 gate_diff(const float* G, const float* Gl, int64_t a, int64_t b, int64_t Kp, int64_t d) {
  const V16 hi = ld(G + a * Kp + d) - ld(G + b * Kp + d);
  if constexpr (kComp) return hi + (ld(Gl + a * Kp + d) - ld(Gl + b * Kp + d));
  return hi;
}

// dst_row = src_row * exp(G_a - G_b) over Kp columns (G_a <= G_b: a is the later row).
template <bool kComp>
inline void gated_row(const float* src, const float* G, const float* Gl, int64_t a, int64_t b, int64_t Kp, float* dst) {
  for (int64_t d = 0; d < Kp; d += 16) (ld(src + d) * exp16(gate_diff<kComp>(G, Gl, a, b, Kp, d))).store(dst + d);
}

inline float dot(const float* a, const float* b, int64_t Kp) {
  V16 acc = V16::zero();
  for (int64_t d = 0; d < Kp; d += 16) acc = fma(ld(a + d), ld(b + d), acc);
  return hsum(acc);
}

// Rows i in [b0, b1) against columns j in [b0, i], with exp(G_i - G_j) formed element by element.
template <bool kBf16>
void diag_direct(ChunkScratch& w, int64_t b0, int64_t b1, float qscale) {
  const int64_t Kp = w.Kp;
  const float *Q = w.Q.get(), *Kn = w.Kn.get(), *G = w.G.get(), *Gl = w.Gl.get(), *beta = w.beta.get();
  float *Akk = w.Akk.get(), *Aqk = w.Aqk.get();
  for (int64_t i = b0; i < b1; ++i)
    for (int64_t j = b0; j <= i; ++j) {
      V16 aq = V16::zero(), ak = V16::zero();
      for (int64_t d = 0; d < Kp; d += 16) {
        const V16 kj = ld(Kn + j * Kp + d) * exp16(gate_diff<!kBf16>(G, Gl, i, j, Kp, d));
        aq = fma(ld(Q + i * Kp + d), kj, aq);
        ak = fma(ld(Kn + i * Kp + d), kj, ak);
      }
      Aqk[i * kChunk + j] = st<kBf16>(hsum(aq) * qscale);
      if (j < i) Akk[i * kChunk + j] = hsum(ak) * beta[i];
    }
}

// Aqk (lower, diagonal included) and L = beta_i (k_i . k_j) (strictly lower) of a chunk of c rows.
// Each 16-row sub-block I: its two 8 x 8 diagonal triangles element by element; the 8 x 8 square
// between them through its middle row m; the columns of earlier sub-blocks through its first row r,
// as one GEMM: [columns j < r] x [q rows | k rows of I] (transposed output).
template <bool kBf16>
void intra_chunk(ChunkScratch& w, int64_t c, float scale) {
  const int64_t Kp = w.Kp;
  const float *Q = w.Q.get(), *Kn = w.Kn.get(), *G = w.G.get(), *Gl = w.Gl.get(), *beta = w.beta.get();
  float *Akk = w.Akk.get(), *Aqk = w.Aqk.get(), *X = w.X.get(), *XT = w.XT.get(), *R = w.R.get();
  constexpr bool kComp = !kBf16;
  std::memset(Akk, 0, sizeof(float) * kChunk * kChunk);
  std::memset(Aqk, 0, sizeof(float) * kChunk * kChunk);
  const float qscale = kBf16 ? scale : 1.0f;   // the f32 candidate folded scale into q
  for (int64_t b0 = 0; b0 < c; b0 += kSub) {
    const int64_t b1 = std::min(c, b0 + kSub), m = std::min(b1, b0 + kHalf);
    diag_direct<kBf16>(w, b0, m, qscale);
    diag_direct<kBf16>(w, m, b1, qscale);
    // Rows [m, b1) x columns [b0, m) through row m: exp(G_i - G_m) exp(G_m - G_j).
    for (int64_t i = m; i < b1; ++i) {
      gated_row<kComp>(Q + i * Kp, G, Gl, i, m, Kp, X + (i - m) * Kp);
      gated_row<kComp>(Kn + i * Kp, G, Gl, i, m, Kp, X + (kSub + i - m) * Kp);
    }
    for (int64_t j = b0; j < m; ++j) gated_row<kComp>(Kn + j * Kp, G, Gl, m, j, Kp, R + (j - b0) * Kp);
    for (int64_t i = m; i < b1; ++i)
      for (int64_t j = b0; j < m; ++j) {
        Aqk[i * kChunk + j] = st<kBf16>(dot(X + (i - m) * Kp, R + (j - b0) * Kp, Kp) * qscale);
        Akk[i * kChunk + j] = dot(X + (kSub + i - m) * Kp, R + (j - b0) * Kp, Kp) * beta[i];
      }
    if (b0 == 0) continue;
    // Rows [b0, b1) x columns [0, r), r = b0: exp(G_i - G_r) exp(G_r - G_j).
    const int64_t r = b0, mi = b1 - b0;
    std::memset(X, 0, sizeof(float) * 2 * kSub * Kp);
    for (int64_t i = b0; i < b1; ++i) {
      gated_row<kComp>(Q + i * Kp, G, Gl, i, r, Kp, X + (i - b0) * Kp);
      gated_row<kComp>(Kn + i * Kp, G, Gl, i, r, Kp, X + (kSub + i - b0) * Kp);
    }
    for (int64_t d = 0; d < Kp; d += 16) {
      transpose16(X + d, Kp, XT + d * 2 * kSub, 2 * kSub);
      transpose16(X + kSub * Kp + d, Kp, XT + d * 2 * kSub + kSub, 2 * kSub);
    }
    for (int64_t j = 0; j < r; ++j) gated_row<kComp>(Kn + j * Kp, G, Gl, r, j, Kp, R + j * Kp);
    gemm(r, 2 * kSub, w.K, R, Kp, AForm::plain, XT, 2 * kSub, w.pack.get(), [&](int64_t j, int64_t col, V16 acc) {
      alignas(64) float s[16];
      acc.store(s);
      for (int64_t ii = 0; ii < mi; ++ii) {
        const int64_t i = b0 + ii;
        if (col == 0) Aqk[i * kChunk + j] = st<kBf16>(s[ii] * qscale);
        else Akk[i * kChunk + j] = s[ii] * beta[i];
      }
    });
  }
}

// Ainv = (I + L)^-1 by forward substitution: row i = e_i - sum_{j<i} L_ij row j, j ascending, the
// row held in registers (at most 4 vectors: row j is zero beyond column j).
template <bool kBf16>
void invert_unit_lower(ChunkScratch& w, int64_t c) {
  static_assert(kChunk == 64);
  const float* L = w.Akk.get();
  float* X = w.Ainv.get();
  std::memset(X, 0, sizeof(float) * kChunk * kChunk);
  for (int64_t i = 0; i < c; ++i) {
    V16 acc[4] = {V16::zero(), V16::zero(), V16::zero(), V16::zero()};
    for (int64_t j = 0; j < i; ++j) {
      const V16 lij = V16::set1(-L[i * kChunk + j]);
      const float* xj = X + j * kChunk;
      acc[0] = fma(lij, ld(xj), acc[0]);
      if (j >= 16) acc[1] = fma(lij, ld(xj + 16), acc[1]);
      if (j >= 32) acc[2] = fma(lij, ld(xj + 32), acc[2]);
      if (j >= 48) acc[3] = fma(lij, ld(xj + 48), acc[3]);
    }
    float* xi = X + i * kChunk;
    for (int m = 0; m < 4; ++m) acc[m].store(xi + 16 * m);
    xi[i] = 1.0f;
  }
  if constexpr (kBf16)
    for (int64_t i = 0; i < c; ++i) st_row<true>(X + i * kChunk, i);
}

// Columns [cols.c0, cols.c1) of pair (n, hv); w sized for at least that width.
template <bool kBf16, ChunkBug kBug = ChunkBug::none>
void chunk_pair(const KdaParams& p, const TensorMap& in, const Tensor* h0, Tensor& o, Tensor& ht, int64_t n,
                int64_t hv, ColumnRange cols, ChunkScratch& w) {
  const int64_t K = p.K, V = cols.width(), HV = p.HV, Kp = w.Kp, Vp = round_up16(V), KVp = Kp + Vp;
  const float scale = static_cast<float>(p.scale_value());
  float *S = w.S.get(), *Q = w.Q.get(), *Kn = w.Kn.get(), *G = w.G.get(), *Vb = w.Vb.get(), *beta = w.beta.get();
  float *Y = w.Y.get(), *WQ = w.WQ.get(), *U = w.U.get(), *Kg = w.Kg.get(), *Vn = w.Vn.get(), *Ob = w.Ob.get();
  float *eg = w.eg.get(), *pack = w.pack.get();
  const float* Sb = kBf16 ? w.Sb.get() : S;
  // (The scratch may have served a wider range before: its padding columns are zeroed here.)
  std::fill(S, S + K * Vp, 0.0f);
  if (h0) load_state(*h0, n, hv, p, S, Vp, cols.c0, cols.c1);
  TokenReader reader(p, in, hv, /*fold_scale=*/!kBf16, /*bf16_storage=*/kBf16);
  const int64_t end = p.seq_end(n);

  for (int64_t t0 = p.seq_begin(n); t0 < end; t0 += kChunk) {
    const int64_t c = std::min(kChunk, end - t0);
    // Rows in, then the chunk-local inclusive cumsum of g.
    for (int64_t i = 0; i < c; ++i) {
      beta[i] = reader.load(t0 + i, Q + i * Kp, Kn + i * Kp, w.vrow.get(), G + i * Kp);
      std::copy_n(w.vrow.get() + cols.c0, V, Vb + i * Vp);
      std::fill(Vb + i * Vp + V, Vb + (i + 1) * Vp, 0.0f);
    }
    // The suffix sums gamma - G_i = sum_{s > i} g_s by their own reverse scan, before G is summed:
    // as a difference of two inclusive sums they would lose |G| 2^-24 to cancellation, the largest
    // error of the state update for channels that decay fast (the reverse-cumsum pitfall).
    float* Rs = w.Rs.get();
    if constexpr (kBug != ChunkBug::gamma_by_difference) {
      for (int64_t d = 0; d < Kp; d += 16) V16::set1(0.0f).store(Rs + (c - 1) * Kp + d);
      for (int64_t i = c - 2; i >= 0; --i)
        for (int64_t d = 0; d < Kp; d += 16) (ld(Rs + (i + 1) * Kp + d) + ld(G + (i + 1) * Kp + d)).store(Rs + i * Kp + d);
    }
    // The inclusive cumsum; the f32 candidate keeps each step's rounding error too (TwoSum, the
    // errors summed in Gl), so that G_i - G_j stays exact past a burst of forgetting (gate_diff).
    float* Gl = w.Gl.get();
    if constexpr (!kBf16) {
      for (int64_t d = 0; d < Kp; d += 16) V16::zero().store(Gl + d);
      for (int64_t i = 1; i < c; ++i)
        for (int64_t d = 0; d < Kp; d += 16) {
          const V16 a = ld(G + (i - 1) * Kp + d), b = ld(G + i * Kp + d), sum = a + b, bb = sum - a;
          const V16 err = (a - (sum - bb)) + (b - bb);
          sum.store(G + i * Kp + d);
          (ld(Gl + (i - 1) * Kp + d) + err).store(Gl + i * Kp + d);
        }
    } else {
      for (int64_t i = 1; i < c; ++i)
        for (int64_t d = 0; d < Kp; d += 16) (ld(G + i * Kp + d) + ld(G + (i - 1) * Kp + d)).store(G + i * Kp + d);
    }
    // (Mutant: the last row of a full chunk, stale rows when the chunk is ragged.)
    const int64_t last = kBug == ChunkBug::ragged_gamma ? kChunk - 1 : c - 1;
    const float* gamma = G + last * Kp;
    if constexpr (kBug == ChunkBug::gamma_by_difference)   // (mutant: the reverse-cumsum pitfall)
      for (int64_t i = 0; i < c; ++i)
        for (int64_t d = 0; d < Kp; d += 16) (ld(G + (c - 1) * Kp + d) - ld(G + i * Kp + d)).store(Rs + i * Kp + d);

    // Gated copies: q exp(G) (rows c.. of WQ), [(k beta) exp(G) | v beta], k exp(gamma - G), exp(gamma).
    float* Qg = WQ + c * Kp;
    for (int64_t i = 0; i < c; ++i) {
      const V16 b = V16::set1(beta[i]);
      for (int64_t d = 0; d < Kp; d += 16) {
        V16 gi = ld(G + i * Kp + d);
        if constexpr (!kBf16) gi = gi + ld(Gl + i * Kp + d);
        const V16 e = exp16(gi);
        (ld(Q + i * Kp + d) * e).store(Qg + i * Kp + d);
        ((ld(Kn + i * Kp + d) * b) * e).store(Y + i * KVp + d);
        (ld(Kn + i * Kp + d) * exp16(ld(Rs + i * Kp + d))).store(Kg + i * Kp + d);
      }
      for (int64_t j = 0; j < Vp; j += 16) (ld(Vb + i * Vp + j) * b).store(Y + i * KVp + Kp + j);
      st_row<kBf16>(Qg + i * Kp, Kp);
      st_row<kBf16>(Y + i * KVp, KVp);
      st_row<kBf16>(Kg + i * Kp, Kp);
    }
    for (int64_t d = 0; d < Kp; d += 16) {
      V16 gm = ld(gamma + d);
      if constexpr (!kBf16) gm = gm + ld(Gl + last * Kp + d);
      exp16(gm).store(eg + d);
    }

    // Intra-chunk products, the inverse, then [W | U] = Ainv [(k beta) exp(G) | v beta].
    intra_chunk<kBf16>(w, c, scale);
    invert_unit_lower<kBf16>(w, c);
    gemm(c, KVp, c, w.Ainv.get(), kChunk, AForm::lower, Y, KVp, pack, [&](int64_t i, int64_t j, V16 acc) {
      float* dst = j < Kp ? WQ + i * Kp + j : U + i * Vp + (j - Kp);
      acc.store(dst);
      st_row<kBf16>(dst, 16);
    });

    // The state as consumed this chunk (bf16: a rounded copy), then one GEMM [W; q exp(G)] S:
    // V' = U - W S (rows < c) and O = (q exp(G)) S (rows >= c); then O += Aqk V'.
    if constexpr (kBf16)
      for (int64_t x = 0; x < K * Vp; x += 16) round_bf16(ld(S + x)).store(w.Sb.get() + x);
    const V16 oscale = V16::set1(kBf16 ? scale : 1.0f);
    gemm(2 * c, Vp, K, WQ, Kp, AForm::plain, Sb, Vp, pack, [&](int64_t i, int64_t j, V16 acc) {
      if (i < c) {
        float* dst = Vn + i * Vp + j;
        (ld(U + i * Vp + j) - acc).store(dst);
        st_row<kBf16>(dst, 16);
      } else {
        (acc * oscale).store(Ob + (i - c) * Vp + j);
      }
    });
    gemm(c, Vp, c, w.Aqk.get(), kChunk, AForm::lower, Vn, Vp, pack, [&](int64_t i, int64_t j, V16 acc) {
      float* dst = Ob + i * Vp + j;
      (ld(dst) + acc).store(dst);
    });
    for (int64_t i = 0; i < c; ++i) {
      st_row<kBf16>(Ob + i * Vp, V);
      store_row(o, ((t0 + i) * HV + hv) * p.V + cols.c0, V, Ob + i * Vp);
    }

    // S <- diag(exp(gamma)) S + (k exp(gamma - G))^T V'.
    if constexpr (kBug != ChunkBug::no_boundary_decay)   // (mutant: the carried state never decays)
      for (int64_t d = 0; d < K; ++d) {
        const V16 e = V16::set1(eg[d]);
        for (int64_t j = 0; j < Vp; j += 16) (ld(S + d * Vp + j) * e).store(S + d * Vp + j);
      }
    gemm(K, Vp, c, Kg, Kp, AForm::transposed, Vn, Vp, pack, [&](int64_t i, int64_t j, V16 acc) {
      float* dst = S + i * Vp + j;
      (ld(dst) + acc).store(dst);
    });
  }
  store_state(ht, n, hv, p, S, Vp, cols.c0, cols.c1);
}

template <bool kBf16, ChunkBug kBug = ChunkBug::none>
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
  const int64_t parts = column_parts(N * HV, p.V, p.B * p.T / N);
  for_each_pair(
      N * HV * parts, flops_per_pair / static_cast<double>(parts),
      [&] {
        int64_t widest = 0;
        for (int64_t part = 0; part < parts; ++part) widest = std::max(widest, column_range(p.V, parts, part).width());
        return ChunkScratch(p.K, widest, p.V);
      },
      [&](int64_t item, ChunkScratch& w) {
        FlushSubnormals ftz;
        const int64_t pair = item / parts;
        chunk_pair<kBf16, kBug>(p, in, h0, o, ht, pair / HV, pair % HV, column_range(p.V, parts, item % parts), w);
      });
}

}  // namespace
}  // namespace kda_cpu

void kda_cpu_chunk_f32(const KdaParams& p, const TensorMap& in, TensorMap& out) {
  kda_cpu::kda_chunk<false>(p, in, out);
}

void kda_cpu_chunk_bf16(const KdaParams& p, const TensorMap& in, TensorMap& out) {
  kda_cpu::kda_chunk<true>(p, in, out);
}

void kda_cpu_chunk_mutant_f32(ChunkBug bug, const KdaParams& p, const TensorMap& in, TensorMap& out) {
  switch (bug) {
    case ChunkBug::none: return kda_cpu::kda_chunk<false>(p, in, out);
    case ChunkBug::gamma_by_difference: return kda_cpu::kda_chunk<false, ChunkBug::gamma_by_difference>(p, in, out);
    case ChunkBug::ragged_gamma: return kda_cpu::kda_chunk<false, ChunkBug::ragged_gamma>(p, in, out);
    case ChunkBug::no_boundary_decay: return kda_cpu::kda_chunk<false, ChunkBug::no_boundary_decay>(p, in, out);
  }
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
