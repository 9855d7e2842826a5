// The attention_decode reference (reference/attention_decode.h): hand-derived values (pages out of
// order, GQA sharing, an empty context), every tier against softmax attention computed here by MPFR
// at 256 bits from the scores, bad input.
#include "reference/attention_decode.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include <mpfr.h>

#include "harness/cases/case.h"
#include "harness/core/dtype.h"
#include "tests/reference/tensor_values.h"

namespace dg {
namespace {

const Tier kTiers[] = {Tier::f64, Tier::dd, Tier::mpfr127, Tier::mpfr256};

// B = 2, n_h = 2, n_kv = 1, d = dv = 1, page = 1, scale 1, a pool of 3 pages stored in reverse:
// sequence 0 holds tokens k = [0, 1], v = [0, 1] in pages 2, 1; sequence 1 is empty. Both q heads
// (q = 1, 1) read the one kv head: s = [0, 1], o = e / (1 + e), lse = ln(1 + e); sequence 1 gives
// o = 0 and lse = -inf.
TEST(AttentionDecodeReference, HandDerivedValues) {
  AttentionDecodeParams p;
  p.B = 2, p.n_h = 2, p.n_kv = 1, p.d = 1, p.dv = 1, p.page = 1, p.max_pages = 2, p.n_pages = 3, p.scale = 1.0f;
  const Tensor q = f64({2, 2, 1}, {1, 1, 5, 5}), k = f64({3, 1, 1, 1}, {7, 1, 0}), v = f64({3, 1, 1, 1}, {7, 1, 0});
  const Tensor table = tensor(DType::i32, {2, 2}, {2, 1, 0, 0}), lens = tensor(DType::i32, {2}, {2, 0});
  const double e = std::exp(1.0);
  for (Tier tier : kTiers) {
    const AttentionDecodeReferenceResult r = attention_decode_reference(tier, p, q, k, v, table, lens);
    for (int h = 0; h < 2; ++h) {
      EXPECT_NEAR(r.o[static_cast<size_t>(h)], e / (1 + e), 1e-15) << tier_name(tier);
      EXPECT_NEAR(r.lse[static_cast<size_t>(h)], std::log1p(e), 1e-15) << tier_name(tier);
      EXPECT_EQ(r.o[static_cast<size_t>(2 + h)], 0.0) << tier_name(tier);
      EXPECT_EQ(r.lse[static_cast<size_t>(2 + h)], -INFINITY) << tier_name(tier);
    }
  }
}

// FP8 pages hold k / k_scale and v / v_scale: the same keys and values stored as [0, 0.5] with
// k_scale 2 and [0, 2] with v_scale 0.5 (e4m3 values) give the same o and lse in every tier.
TEST(AttentionDecodeReference, Fp8ScalesDequantizeExactly) {
  AttentionDecodeParams p;
  p.B = 1, p.n_h = 1, p.n_kv = 1, p.d = 1, p.dv = 1, p.page = 2, p.max_pages = 1, p.n_pages = 2, p.scale = 1.0f;
  p.k_scale = 2.0f, p.v_scale = 0.5f;
  const Tensor q = f64({1, 1, 1}, {1}), k = tensor(DType::e4m3, {2, 2, 1, 1}, {0, 0.5, 9, 9}),
               v = tensor(DType::e4m3, {2, 2, 1, 1}, {0, 2, 9, 9});
  const Tensor table = tensor(DType::i32, {1, 1}, {0}), lens = tensor(DType::i32, {1}, {2});
  const double e = std::exp(1.0);
  for (Tier tier : kTiers) {
    const AttentionDecodeReferenceResult r = attention_decode_reference(tier, p, q, k, v, table, lens);
    EXPECT_NEAR(r.o[0], e / (1 + e), 1e-15) << tier_name(tier);
    EXPECT_NEAR(r.lse[0], std::log1p(e), 1e-15) << tier_name(tier);
  }
}

struct Random {
  AttentionDecodeParams p;
  std::vector<double> q, k, v, table, lens;
};

// B = 3 sequences of 0, 5 and 37 tokens in pages of 4 (pages shuffled in the pool), n_h = 4 over
// n_kv = 2, d = 16, dv = 8, bf16 values, scores of a few units.
Random random_case() {
  Random c;
  c.p.B = 3, c.p.n_h = 4, c.p.n_kv = 2, c.p.d = 16, c.p.dv = 8, c.p.page = 4, c.p.max_pages = 10;
  c.p.scale = static_cast<float>(1.0 / std::sqrt(16.0));
  c.lens = {0, 5, 37};
  c.p.n_pages = 0 + 2 + 10 + 1;
  std::mt19937_64 gen(7);
  std::normal_distribution<double> nd;
  std::vector<int64_t> perm(static_cast<size_t>(c.p.n_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), gen);
  c.table.assign(static_cast<size_t>(c.p.B * c.p.max_pages), 0.0);
  size_t next = 0;
  for (int64_t b = 0; b < c.p.B; ++b)
    for (int64_t j = 0; j < (static_cast<int64_t>(c.lens[static_cast<size_t>(b)]) + 3) / 4; ++j)
      c.table[static_cast<size_t>(b * c.p.max_pages + j)] = static_cast<double>(perm[next++]);
  c.q.resize(static_cast<size_t>(c.p.B * c.p.n_h * c.p.d));
  c.k.resize(static_cast<size_t>(c.p.n_pages * c.p.page * c.p.n_kv * c.p.d));
  c.v.resize(static_cast<size_t>(c.p.n_pages * c.p.page * c.p.n_kv * c.p.dv));
  for (auto* t : {&c.q, &c.k, &c.v})
    for (double& x : *t) x = round_to(DType::bf16, 1.5 * nd(gen));
  return c;
}

// softmax(scale q.k) v and the natural lse of row (b, h), from the scores, in MPFR at 256 bits.
void mpfr_row(const Random& c, int64_t b, int64_t h, std::vector<double>& o, double& lse) {
  const AttentionDecodeParams& p = c.p;
  const int64_t L = static_cast<int64_t>(c.lens[static_cast<size_t>(b)]), g = h / (p.n_h / p.n_kv);
  std::vector<mpfr_t> s(static_cast<size_t>(L));
  mpfr_t t, m, l, acc;
  mpfr_inits2(256, t, m, l, acc, static_cast<mpfr_ptr>(nullptr));
  for (int64_t j = 0; j < L; ++j) {
    mpfr_init2(s[static_cast<size_t>(j)], 256);
    mpfr_set_zero(s[static_cast<size_t>(j)], 1);
    const int64_t slot = static_cast<int64_t>(c.table[static_cast<size_t>(b * p.max_pages + j / p.page)]) * p.page + j % p.page;
    for (int64_t i = 0; i < p.d; ++i) {
      mpfr_set_d(t, c.q[static_cast<size_t>((b * p.n_h + h) * p.d + i)], MPFR_RNDN);
      mpfr_mul_d(t, t, c.k[static_cast<size_t>((slot * p.n_kv + g) * p.d + i)], MPFR_RNDN);
      mpfr_add(s[static_cast<size_t>(j)], s[static_cast<size_t>(j)], t, MPFR_RNDN);
    }
    mpfr_mul_d(s[static_cast<size_t>(j)], s[static_cast<size_t>(j)], static_cast<double>(p.scale), MPFR_RNDN);
  }
  mpfr_set_zero(l, 1);
  for (int64_t j = 0; j < L; ++j) {   // l = sum exp(s_j) (no max needed at these scores)
    mpfr_exp(t, s[static_cast<size_t>(j)], MPFR_RNDN);
    mpfr_add(l, l, t, MPFR_RNDN);
  }
  for (int64_t ch = 0; ch < p.dv; ++ch) {
    mpfr_set_zero(acc, 1);
    for (int64_t j = 0; j < L; ++j) {
      const int64_t slot = static_cast<int64_t>(c.table[static_cast<size_t>(b * p.max_pages + j / p.page)]) * p.page + j % p.page;
      mpfr_exp(t, s[static_cast<size_t>(j)], MPFR_RNDN);
      mpfr_mul_d(t, t, c.v[static_cast<size_t>((slot * p.n_kv + g) * p.dv + ch)], MPFR_RNDN);
      mpfr_add(acc, acc, t, MPFR_RNDN);
    }
    mpfr_div(acc, acc, l, MPFR_RNDN);
    o[static_cast<size_t>(ch)] = L ? mpfr_get_d(acc, MPFR_RNDN) : 0.0;
  }
  mpfr_log(m, l, MPFR_RNDN);
  lse = L ? mpfr_get_d(m, MPFR_RNDN) : -INFINITY;
  for (int64_t j = 0; j < L; ++j) mpfr_clear(s[static_cast<size_t>(j)]);
  mpfr_clears(t, m, l, acc, static_cast<mpfr_ptr>(nullptr));
}

// dd and MPFR within one ulp of the independent value (rounded to odd), f64 within 64 (its exp and
// log are correctly rounded to about an ulp, and the scores' error scales the weights).
TEST(AttentionDecodeReference, TiersAgreeWithAnIndependentMpfrComputation) {
  const Random c = random_case();
  const AttentionDecodeParams& p = c.p;
  const Tensor q = f64({p.B, p.n_h, p.d}, c.q), k = f64({p.n_pages, p.page, p.n_kv, p.d}, c.k),
               v = f64({p.n_pages, p.page, p.n_kv, p.dv}, c.v), table = tensor(DType::i32, {p.B, p.max_pages}, c.table),
               lens = tensor(DType::i32, {p.B}, c.lens);
  for (Tier tier : kTiers) {
    const AttentionDecodeReferenceResult r = attention_decode_reference(tier, p, q, k, v, table, lens);
    const double tol = tier == Tier::f64 ? 64.0 : 1.0;
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.n_h; ++h) {
        std::vector<double> o(static_cast<size_t>(p.dv));
        double lse = 0;
        mpfr_row(c, b, h, o, lse);
        const size_t i = static_cast<size_t>(b * p.n_h + h);
        if (std::isinf(lse)) EXPECT_EQ(r.lse[i], lse) << tier_name(tier);
        else EXPECT_LE(std::fabs(r.lse[i] - lse), tol * ulp(DType::f64, lse)) << tier_name(tier) << " lse " << b << "," << h;
        for (int64_t ch = 0; ch < p.dv; ++ch) {
          const double ref = o[static_cast<size_t>(ch)], got = r.o[i * static_cast<size_t>(p.dv) + static_cast<size_t>(ch)];
          EXPECT_LE(std::fabs(got - ref), tol * ulp(DType::f64, ref)) << tier_name(tier) << " o " << b << "," << h << "," << ch;
        }
      }
  }
}

void expect_refused(const AttentionDecodeParams& p, const Tensor& q, const Tensor& table, const Tensor& lens,
                    const std::string& what) {
  const Tensor k = f64({p.n_pages, p.page, p.n_kv, p.d}, std::vector<double>(static_cast<size_t>(p.n_pages * p.page * p.n_kv * p.d), 0.5));
  const Tensor v = f64({p.n_pages, p.page, p.n_kv, p.dv}, std::vector<double>(static_cast<size_t>(p.n_pages * p.page * p.n_kv * p.dv), 0.5));
  try {
    attention_decode_reference(Tier::dd, p, q, k, v, table, lens);
    FAIL() << "accepted: " << what;
  } catch (const InputError& ex) {
    EXPECT_NE(std::string(ex.what()).find(what), std::string::npos) << ex.what();
  }
}

TEST(AttentionDecodeReference, BadInputIsRefused) {
  AttentionDecodeParams p;
  p.B = 1, p.n_h = 2, p.n_kv = 1, p.d = 2, p.dv = 2, p.page = 2, p.max_pages = 2, p.n_pages = 3, p.scale = 1.0f;
  const Tensor q = f64({1, 2, 2}, {1, 2, 3, 4}), table = tensor(DType::i32, {1, 2}, {0, 1}), lens = tensor(DType::i32, {1}, {3});
  AttentionDecodeParams gqa = p;
  gqa.n_kv = 3;
  expect_refused(gqa, q, table, lens, "n_h = 2 must be a multiple of n_kv = 3");
  expect_refused(p, q, tensor(DType::i32, {1, 2}, {0, 3}), lens, "page_table[0][1] = 3 is outside the pool [0, 3)");
  expect_refused(p, q, tensor(DType::i32, {1, 2}, {-1, 0}), lens, "page_table[0][0] = -1");
  expect_refused(p, q, table, tensor(DType::i32, {1}, {5}), "seqlens[0] = 5 is outside [0, max_pages*page = 2*2]");
  expect_refused(p, f64({1, 2, 2}, {1, std::nan(""), 3, 4}), table, lens, "'q' has a non-finite value at element 1");
}

}  // namespace
}  // namespace dg
