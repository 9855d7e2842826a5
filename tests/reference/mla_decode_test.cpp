// The mla_decode reference (reference/mla_decode.h): hand-derived values (the rope part of the
// score, sparse indices with -1, an out-of-length entry and a duplicate, an empty context), every
// tier against the absorbed softmax computed here by MPFR at 256 bits, the absorbed form against the
// expanded one (weights drawn here), bad input.
#include "reference/mla_decode.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <mpfr.h>

#include "harness/cases/case.h"
#include "harness/core/dtype.h"
#include "tests/reference/tensor_values.h"

namespace dg {
namespace {

const Tier kTiers[] = {Tier::f64, Tier::dd, Tier::mpfr127, Tier::mpfr256};

// d_c = rope = 1, page 1, scale 1, q~ = q_pe = 1; pool rows [c_kv, k_pe]: page 0 [0, 2], page 1
// [1, 0], page 2 unused. Sequence 0 (pages 0, 1): s = [0 + 2, 1 + 0] = [2, 1], o~ = (0 e^2 + 1 e) /
// (e^2 + e) = 1 / (1 + e), lse = ln(e^2 + e). Sequence 1 is empty: o~ = 0, lse = -inf. Sparse with
// topk 4, row 0 = [1, -1, 3, 1] (-1 invalid, 3 past the length 2, token 1 twice): keys {1, 1}, o~ = 1,
// lse = 1 + ln 2; row 1 = [0, -1, -1, -1] (past its length 0): no key.
TEST(MlaDecodeReference, HandDerivedValues) {
  MlaDecodeParams p;
  p.B = 2, p.n_h = 1, p.d_c = 1, p.rope = 1, p.page = 1, p.max_pages = 4, p.n_pages = 3, p.scale = 1.0f;
  const Tensor q = f64({2, 1, 1}, {1, 1}), q_pe = f64({2, 1, 1}, {1, 1}), latent = f64({3, 1, 2}, {0, 2, 1, 0, 7, 7});
  const Tensor table = tensor(DType::i32, {2, 4}, {0, 1, 0, 0, 0, 0, 0, 0}), lens = tensor(DType::i32, {2}, {2, 0});
  const double e = std::exp(1.0);
  for (Tier tier : kTiers) {
    const AttentionDecodeReferenceResult r = mla_decode_reference(tier, p, q, q_pe, latent, table, lens, Tensor());
    EXPECT_NEAR(r.o[0], 1 / (1 + e), 1e-15) << tier_name(tier);
    EXPECT_NEAR(r.lse[0], std::log(e * e + e), 1e-15) << tier_name(tier);
    EXPECT_EQ(r.o[1], 0.0) << tier_name(tier);
    EXPECT_EQ(r.lse[1], -INFINITY) << tier_name(tier);
    MlaDecodeParams sp = p;
    sp.topk = 4;
    const Tensor idx = tensor(DType::i32, {2, 4}, {1, -1, 3, 1, 0, -1, -1, -1});
    const AttentionDecodeReferenceResult s = mla_decode_reference(tier, sp, q, q_pe, latent, table, lens, idx);
    EXPECT_NEAR(s.o[0], 1.0, 1e-15) << tier_name(tier);
    EXPECT_NEAR(s.lse[0], 1 + std::log(2.0), 1e-15) << tier_name(tier);
    EXPECT_EQ(s.o[1], 0.0) << tier_name(tier);
    EXPECT_EQ(s.lse[1], -INFINITY) << tier_name(tier);
  }
}

struct Random {
  MlaDecodeParams p;
  std::vector<double> q, q_pe, latent, table, lens, idx;
};

// B = 3 sequences of 0, 5 and 37 tokens in pages of 4 (pages out of order), n_h = 3, d_c = 16,
// rope = 4, bf16 values, scale 1/4; sparse rows of topk 12 mixing valid, -1, out-of-length and
// repeated entries.
Random random_case(int64_t topk) {
  Random c;
  c.p.B = 3, c.p.n_h = 3, c.p.d_c = 16, c.p.rope = 4, c.p.page = 4, c.p.max_pages = 10, c.p.n_pages = 13, c.p.topk = topk;
  c.p.scale = 0.25f;
  c.lens = {0, 5, 37};
  c.table.assign(30, 0.0);
  const int perm[] = {12, 3, 7, 0, 9, 1, 11, 4, 10, 2, 8, 6};   // 2 + 10 pages used
  for (int j = 0; j < 2; ++j) c.table[static_cast<size_t>(10 + j)] = perm[j];
  for (int j = 0; j < 10; ++j) c.table[static_cast<size_t>(20 + j)] = perm[2 + j];
  std::mt19937_64 gen(11);
  std::normal_distribution<double> nd;
  std::uniform_int_distribution<int> pos(-1, 39);
  c.q.resize(3 * 3 * 16), c.q_pe.resize(9 * 4), c.latent.resize(13 * 4 * 20), c.idx.resize(static_cast<size_t>(3 * topk));
  for (auto* t : {&c.q, &c.q_pe, &c.latent})
    for (double& x : *t) x = round_to(DType::bf16, 1.5 * nd(gen));
  for (double& x : c.idx) x = pos(gen);
  if (topk > 1) c.idx[1] = c.idx[0];
  return c;
}

// o~ and lse of row (b, h) from the key positions of mla_decode.h, in MPFR at 256 bits.
void mpfr_row(const Random& c, int64_t b, int64_t h, std::vector<double>& o, double& lse) {
  const MlaDecodeParams& p = c.p;
  const int64_t L = static_cast<int64_t>(c.lens[static_cast<size_t>(b)]), D = p.width();
  std::vector<int64_t> keys;
  for (int64_t t = 0; t < (p.topk ? p.topk : L); ++t) {
    const int64_t x = p.topk ? static_cast<int64_t>(c.idx[static_cast<size_t>(b * p.topk + t)]) : t;
    if (x >= 0 && x < L) keys.push_back(x);
  }
  mpfr_t t, s, l, acc;
  mpfr_inits2(256, t, s, l, acc, static_cast<mpfr_ptr>(nullptr));
  std::vector<mpfr_t> e(keys.size());
  mpfr_set_zero(l, 1);
  for (size_t k = 0; k < keys.size(); ++k) {
    const int64_t j = keys[k];
    const double* row = c.latent.data() + (static_cast<int64_t>(c.table[static_cast<size_t>(b * p.max_pages + j / p.page)]) * p.page + j % p.page) * D;
    mpfr_set_zero(s, 1);
    for (int64_t i = 0; i < D; ++i) {
      mpfr_set_d(t, i < p.d_c ? c.q[static_cast<size_t>((b * p.n_h + h) * p.d_c + i)] : c.q_pe[static_cast<size_t>((b * p.n_h + h) * p.rope + i - p.d_c)], MPFR_RNDN);
      mpfr_mul_d(t, t, row[i], MPFR_RNDN);
      mpfr_add(s, s, t, MPFR_RNDN);
    }
    mpfr_mul_d(s, s, static_cast<double>(p.scale), MPFR_RNDN);
    mpfr_init2(e[k], 256);
    mpfr_exp(e[k], s, MPFR_RNDN);
    mpfr_add(l, l, e[k], MPFR_RNDN);
  }
  for (int64_t ch = 0; ch < p.d_c; ++ch) {
    mpfr_set_zero(acc, 1);
    for (size_t k = 0; k < keys.size(); ++k) {
      const int64_t j = keys[k];
      const double* row = c.latent.data() + (static_cast<int64_t>(c.table[static_cast<size_t>(b * p.max_pages + j / p.page)]) * p.page + j % p.page) * D;
      mpfr_mul_d(t, e[k], row[ch], MPFR_RNDN);
      mpfr_add(acc, acc, t, MPFR_RNDN);
    }
    mpfr_div(acc, acc, l, MPFR_RNDN);
    o[static_cast<size_t>(ch)] = keys.empty() ? 0.0 : mpfr_get_d(acc, MPFR_RNDN);
  }
  mpfr_log(s, l, MPFR_RNDN);
  lse = keys.empty() ? -INFINITY : mpfr_get_d(s, MPFR_RNDN);
  for (mpfr_t& x : e) mpfr_clear(x);
  mpfr_clears(t, s, l, acc, static_cast<mpfr_ptr>(nullptr));
}

// Dense and sparse: dd and MPFR within one ulp of the independent value, f64 within 64.
TEST(MlaDecodeReference, TiersAgreeWithAnIndependentMpfrComputation) {
  for (int64_t topk : {0, 12}) {
    const Random c = random_case(topk);
    const MlaDecodeParams& p = c.p;
    const Tensor q = f64({3, 3, 16}, c.q), q_pe = f64({3, 3, 4}, c.q_pe), latent = f64({13, 4, 20}, c.latent),
                 table = tensor(DType::i32, {3, 10}, c.table), lens = tensor(DType::i32, {3}, c.lens),
                 idx = topk ? tensor(DType::i32, {3, topk}, c.idx) : Tensor();
    for (Tier tier : kTiers) {
      const AttentionDecodeReferenceResult r = mla_decode_reference(tier, p, q, q_pe, latent, table, lens, idx);
      const double tol = tier == Tier::f64 ? 64.0 : 1.0;
      for (int64_t i = 0; i < p.B * p.n_h; ++i) {
        std::vector<double> o(static_cast<size_t>(p.d_c));
        double lse = 0;
        mpfr_row(c, i / p.n_h, i % p.n_h, o, lse);
        if (std::isinf(lse)) EXPECT_EQ(r.lse[static_cast<size_t>(i)], lse) << tier_name(tier);
        else EXPECT_LE(std::fabs(r.lse[static_cast<size_t>(i)] - lse), tol * ulp(DType::f64, lse)) << tier_name(tier) << " topk " << topk;
        for (int64_t ch = 0; ch < p.d_c; ++ch) {
          const double ref = o[static_cast<size_t>(ch)], got = r.o[static_cast<size_t>(i * p.d_c + ch)];
          EXPECT_LE(std::fabs(got - ref), tol * ulp(DType::f64, ref)) << tier_name(tier) << " topk " << topk << " row " << i;
        }
      }
    }
  }
}

// The absorbed form against the expanded one (notes/model-ops.md section 1.3) at GLM-5.3-Flash's
// NoPE geometry (d_c 512, d_nope 256, rope 0, d_v 256) and GLM-5's 576 (d_nope 192, rope 64), scale
// 1/16, n_h 2, 40 tokens in pages of 16. W_UK,h [d_nope,d_c] and W_UV,h [d_v,d_c] ~ N(0, 1/d_c),
// q_nope, q_pe and the latent ~ N(0,1) in bf16. Expanded, in doubles: k_h = [W_UK,h c ; k_pe],
// v_h = W_UV,h c, o_h = softmax(scale q.k_h) v_h. Absorbed: the dd reference on q~_h = W_UK,h^T
// q_nope,h, then o_h = W_UV,h o~_h.
struct Mla {
  int64_t d_nope = 0, rope = 0, d_c = 512, d_v = 256, n_h = 2, L = 40, page = 16;
  std::vector<double> wuk, wuv, q_nope, q_pe, latent;   // latent [3 pages, 16, d_c + rope]
};

Mla draw(int64_t d_nope, int64_t rope) {
  Mla m;
  m.d_nope = d_nope, m.rope = rope;
  std::mt19937_64 gen(5);
  std::normal_distribution<double> nd;
  const auto fill = [&](std::vector<double>& v, size_t n, double sd, bool bf16) {
    v.resize(n);
    for (double& x : v) x = bf16 ? round_to(DType::bf16, sd * nd(gen)) : sd * nd(gen);
  };
  const double w = 1.0 / std::sqrt(static_cast<double>(m.d_c));
  fill(m.wuk, static_cast<size_t>(m.n_h * d_nope * m.d_c), w, false);
  fill(m.wuv, static_cast<size_t>(m.n_h * m.d_v * m.d_c), w, false);
  fill(m.q_nope, static_cast<size_t>(m.n_h * d_nope), 1.0, true);
  fill(m.q_pe, static_cast<size_t>(m.n_h * rope), 1.0, true);
  fill(m.latent, static_cast<size_t>(3 * m.page * (m.d_c + rope)), 1.0, true);
  return m;
}

// y = W x (W [rows, cols] of head h), or y = W^T x with `transposed`.
std::vector<double> apply(const std::vector<double>& W, int64_t h, int64_t rows, int64_t cols, const double* x, bool transposed) {
  std::vector<double> y(static_cast<size_t>(transposed ? cols : rows), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double w = W[static_cast<size_t>((h * rows + r) * cols + c)];
      if (transposed) y[static_cast<size_t>(c)] += w * x[r];
      else y[static_cast<size_t>(r)] += w * x[c];
    }
  return y;
}

// The expanded form's o [n_h, d_v] (token j in pool row j: the page table is the identity).
std::vector<double> expanded(const Mla& m) {
  const int64_t D = m.d_c + m.rope;
  std::vector<double> o(static_cast<size_t>(m.n_h * m.d_v), 0.0);
  for (int64_t h = 0; h < m.n_h; ++h) {
    std::vector<double> s(static_cast<size_t>(m.L));
    double mx = -INFINITY, l = 0;
    for (int64_t j = 0; j < m.L; ++j) {
      const std::vector<double> k = apply(m.wuk, h, m.d_nope, m.d_c, m.latent.data() + j * D, false);
      double dot = 0;
      for (int64_t i = 0; i < m.d_nope; ++i) dot += m.q_nope[static_cast<size_t>(h * m.d_nope + i)] * k[static_cast<size_t>(i)];
      for (int64_t i = 0; i < m.rope; ++i) dot += m.q_pe[static_cast<size_t>(h * m.rope + i)] * m.latent[static_cast<size_t>(j * D + m.d_c + i)];
      mx = std::max(mx, s[static_cast<size_t>(j)] = dot / 16.0);
    }
    for (int64_t j = 0; j < m.L; ++j) {
      const double e = std::exp(s[static_cast<size_t>(j)] - mx);
      l += e;
      const std::vector<double> v = apply(m.wuv, h, m.d_v, m.d_c, m.latent.data() + j * D, false);
      for (int64_t c = 0; c < m.d_v; ++c) o[static_cast<size_t>(h * m.d_v + c)] += e * v[static_cast<size_t>(c)];
    }
    for (int64_t c = 0; c < m.d_v; ++c) o[static_cast<size_t>(h * m.d_v + c)] /= l;
  }
  return o;
}

// The absorbed form's o = W_UV o~ through the reference, q~ = W^T q_nope (W: W_UK, or `wq` to mix
// the forms) stored in `qdt`, at the softmax scale `scale`.
std::vector<double> absorbed(const Mla& m, const std::vector<double>& wq, DType qdt, float scale) {
  MlaDecodeParams p;
  p.B = 1, p.n_h = m.n_h, p.d_c = m.d_c, p.rope = m.rope, p.page = m.page, p.max_pages = 3, p.n_pages = 3, p.scale = scale;
  std::vector<double> qt;
  for (int64_t h = 0; h < m.n_h; ++h) {
    const std::vector<double> x = apply(wq, h, m.d_nope, m.d_c, m.q_nope.data() + h * m.d_nope, true);
    qt.insert(qt.end(), x.begin(), x.end());
  }
  const AttentionDecodeReferenceResult r = mla_decode_reference(
      Tier::dd, p, tensor(qdt, {1, m.n_h, m.d_c}, qt), f64({1, m.n_h, m.rope}, m.q_pe), f64({3, m.page, m.d_c + m.rope}, m.latent),
      tensor(DType::i32, {1, 3}, {0, 1, 2}), tensor(DType::i32, {1}, {static_cast<double>(m.L)}), Tensor());
  std::vector<double> o;
  for (int64_t h = 0; h < m.n_h; ++h) {
    const std::vector<double> y = apply(m.wuv, h, m.d_v, m.d_c, r.o.data() + h * m.d_c, false);
    o.insert(o.end(), y.begin(), y.end());
  }
  return o;
}

// ||a - b|| / ||b||.
double rel(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
  return std::sqrt(num / den);
}

// With q~ in f64 the two forms agree to the doubles' rounding (1.5e-15 and 1.6e-15 measured, < 1e-14
// asserted); with q~ stored in bf16 (the production format) to bf16's error (1.3e-3 and 2.2e-3:
// between 2^-14 and 2^-7). Mixing the forms breaks the agreement: the kernel's head dim
// (d_c + rope)^-0.5 as the scale is off by 0.19 and 0.24, q~ absorbed through W_UV instead of W_UK
// (NoPE, where d_v = d_nope) by 0.97; more than 0.05 asserted.
TEST(MlaDecodeReference, AbsorbedAndExpandedFormsAgreeToTheFormatsError) {
  for (const auto& [d_nope, rope] : {std::pair<int64_t, int64_t>{256, 0}, {192, 64}}) {
    const Mla m = draw(d_nope, rope);
    const std::vector<double> want = expanded(m);
    const std::string geo = "d_nope " + std::to_string(d_nope) + ", rope " + std::to_string(rope);
    EXPECT_LT(rel(absorbed(m, m.wuk, DType::f64, 0.0625f), want), 1e-14) << geo;
    const double bf16 = rel(absorbed(m, m.wuk, DType::bf16, 0.0625f), want);
    EXPECT_LT(bf16, std::ldexp(1.0, -7)) << geo;
    EXPECT_GT(bf16, std::ldexp(1.0, -14)) << geo;
    const float head_dim = static_cast<float>(1.0 / std::sqrt(static_cast<double>(m.d_c + rope)));
    EXPECT_GT(rel(absorbed(m, m.wuk, DType::f64, head_dim), want), 0.05) << geo;
    if (m.d_v == d_nope) {
      EXPECT_GT(rel(absorbed(m, m.wuv, DType::f64, 0.0625f), want), 0.05) << geo;
    }
  }
}

void expect_refused(const MlaDecodeParams& p, const Tensor& q, const Tensor& latent, const Tensor& table, const Tensor& idx,
                    const std::string& what) {
  try {
    mla_decode_reference(Tier::dd, p, q, f64({1, 2, 1}, {1, 1}), latent, table, tensor(DType::i32, {1}, {3}), idx);
    FAIL() << "accepted: " << what;
  } catch (const InputError& ex) {
    EXPECT_NE(std::string(ex.what()).find(what), std::string::npos) << ex.what();
  }
}

TEST(MlaDecodeReference, BadInputIsRefused) {
  MlaDecodeParams p;
  p.B = 1, p.n_h = 2, p.d_c = 2, p.rope = 1, p.page = 2, p.max_pages = 2, p.n_pages = 3, p.topk = 2, p.scale = 1.0f;
  const Tensor q = f64({1, 2, 2}, {1, 2, 3, 4}), latent = f64({3, 2, 3}, std::vector<double>(18, 0.5));
  const Tensor table = tensor(DType::i32, {1, 2}, {0, 1}), idx = tensor(DType::i32, {1, 2}, {0, 2});
  expect_refused(p, q, latent, table, tensor(DType::i32, {1, 2}, {0, 4}), "indices[0][1] = 4 is outside [-1, max_pages*page = 4)");
  expect_refused(p, q, latent, table, tensor(DType::i32, {1, 2}, {-2, 0}), "indices[0][0] = -2");
  expect_refused(p, q, latent, tensor(DType::i32, {1, 2}, {0, 3}), idx, "mla_decode: page_table[0][1] = 3 is outside the pool [0, 3)");
  expect_refused(p, q, f64({3, 2, 2}, std::vector<double>(12, 0.5)), table, idx, "'latent' has shape [3,2,2], expected [n_pages,page,d_c+rope]");
  expect_refused(p, f64({1, 2, 2}, {1, std::nan(""), 3, 4}), latent, table, idx, "'q' has a non-finite value at element 1");
  expect_refused(p, q, latent, table, tensor(DType::i32, {1, 3}, {0, 1, 2}), "'indices' has shape [1,3], expected [B,topk]");
}

}  // namespace
}  // namespace dg
