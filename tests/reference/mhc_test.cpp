// The mhc reference (reference/mhc.h): a hand-derived site (F = 0, equal comb logits, where the cast
// of C to bf16 is visible), every tier against the whole op computed here by MPFR at 256 bits (the
// casts as 8-bit roundings), and bad input.
#include "reference/mhc.h"

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
constexpr int64_t n = 4;

// F = 0 and b = 0: a = 0, so pre = 1/2 + 1e-6, post = 1 and every C[j,k] = c, where c starts at
// 1/4 + 1e-6 and each normalization maps c to c / (4c + 1e-6). C's cast to bf16 is 1/4 (c is within
// 2^-20 of it), so X'_k = Fo + (X_0 + X_1 + X_2 + X_3) / 4 exactly, for every k; without the cast it
// would differ by ~1e-6 relative. x_in = (1/2 + 1e-6) sum_j X_j.
TEST(MhcReference, HandDerivedSite) {
  const int64_t H = 2;
  const Tensor x = f64({1, n, H}, {1, 2, 3, -4, 5, 6, -7, 8}), fo = f64({1, H}, {10, 20});
  const Tensor phi(DType::f32, {24, n * H}), bias(DType::f32, {24});
  const Tensor scale = tensor(DType::f32, {3}, {1, 1, 1});
  double c = 0.25 + 1e-6;
  for (int i = 0; i < 1 + 2 * 19; ++i) c = c / (4 * c + 1e-6);
  for (Tier tier : kTiers) {
    const MhcReferenceResult r = mhc_reference(tier, {1, H, 20, DType::bf16}, x, fo, phi, scale, bias);
    for (int64_t i = 0; i < n * n; ++i) EXPECT_NEAR(r.C[static_cast<size_t>(i)], c, 1e-15) << tier_name(tier);
    EXPECT_NEAR(r.x_in[0], (0.5 + 1e-6) * 2, 1e-14) << tier_name(tier);      // 1 + 3 + 5 - 7
    EXPECT_NEAR(r.x_in[1], (0.5 + 1e-6) * 12, 1e-14) << tier_name(tier);     // 2 - 4 + 6 + 8
    for (int64_t k = 0; k < n; ++k) {
      EXPECT_EQ(r.x_out[static_cast<size_t>(k * H)], 10 + 2 / 4.0) << tier_name(tier);
      EXPECT_EQ(r.x_out[static_cast<size_t>(k * H + 1)], 20 + 12 / 4.0) << tier_name(tier);
    }
  }
  // With f32 streams the casts are to f32: c is no longer 1/4 there.
  const MhcReferenceResult f = mhc_reference(Tier::dd, {1, H, 20, DType::f32}, x, fo, phi, scale, bias);
  EXPECT_EQ(f.x_out[0], static_cast<double>(10 + 2 * static_cast<double>(static_cast<float>(c))));
}

// The whole op by MPFR at 256 bits, in mhc.h's order, with the casts as roundings to 8 bits. One
// token at a time: logits (the norm, the projection, s and b), maps (the gates, softmax, Sinkhorn,
// the casts), mix.
struct Exact {
  std::vector<double> x_in, x_out, C;
};
struct MpfrSite {
  mpfr_t acc, t1, r, mx, a[24], pre[n], post[n], C[16];
  MpfrSite() {
    mpfr_inits2(256, acc, t1, r, mx, static_cast<mpfr_ptr>(nullptr));
    for (auto& v : a) mpfr_init2(v, 256);
    for (int i = 0; i < 4; ++i) mpfr_inits2(256, pre[i], post[i], static_cast<mpfr_ptr>(nullptr));
    for (auto& v : C) mpfr_init2(v, 256);
  }
  ~MpfrSite() {
    mpfr_clears(acc, t1, r, mx, static_cast<mpfr_ptr>(nullptr));
    for (auto& v : a) mpfr_clear(v);
    for (int i = 0; i < 4; ++i) mpfr_clears(pre[i], post[i], static_cast<mpfr_ptr>(nullptr));
    for (auto& v : C) mpfr_clear(v);
  }
  void sigmoid(mpfr_t out, const mpfr_t z) {   // 1 / (1 + exp(-z))
    mpfr_neg(t1, z, MPFR_RNDN);
    mpfr_exp(t1, t1, MPFR_RNDN);
    mpfr_add_d(t1, t1, 1.0, MPFR_RNDN);
    mpfr_d_div(out, 1.0, t1, MPFR_RNDN);
  }
  void normalize(bool rows) {
    for (int p = 0; p < 4; ++p) {
      mpfr_set_zero(acc, 1);
      for (int q = 0; q < 4; ++q) mpfr_add(acc, acc, C[rows ? 4 * p + q : 4 * q + p], MPFR_RNDN);
      mpfr_add_d(acc, acc, 1e-6, MPFR_RNDN);
      for (int q = 0; q < 4; ++q) mpfr_div(C[rows ? 4 * p + q : 4 * q + p], C[rows ? 4 * p + q : 4 * q + p], acc, MPFR_RNDN);
    }
  }
  // a[m] = (F x)_m r s_(m's group) + b_m over the token's D = 4H values.
  void logits(const double* xt, int64_t D, const std::vector<double>& phi, const std::vector<double>& s,
              const std::vector<double>& b) {
    mpfr_set_zero(acc, 1);
    for (int64_t i = 0; i < D; ++i) {
      mpfr_set_d(t1, xt[i], MPFR_RNDN);
      mpfr_mul_d(t1, t1, xt[i], MPFR_RNDN);
      mpfr_add(acc, acc, t1, MPFR_RNDN);
    }
    mpfr_div_si(r, acc, static_cast<long>(D), MPFR_RNDN);
    mpfr_add_d(r, r, 1e-5, MPFR_RNDN);
    mpfr_rec_sqrt(r, r, MPFR_RNDN);
    for (int m = 0; m < 24; ++m) {
      mpfr_set_zero(a[m], 1);
      for (int64_t i = 0; i < D; ++i) {
        mpfr_set_d(t1, phi[static_cast<size_t>(m * D + i)], MPFR_RNDN);
        mpfr_mul_d(t1, t1, xt[i], MPFR_RNDN);
        mpfr_add(a[m], a[m], t1, MPFR_RNDN);
      }
      mpfr_mul(a[m], a[m], r, MPFR_RNDN);
      mpfr_mul_d(a[m], a[m], s[m < 4 ? 0 : m < 8 ? 1 : 2], MPFR_RNDN);
      mpfr_add_d(a[m], a[m], b[static_cast<size_t>(m)], MPFR_RNDN);
    }
  }
  // pre, post (cast), C (Sinkhorn; written to c before its cast).
  void maps(int64_t iters, double* c) {
    for (auto& v : C) mpfr_set_prec(v, 256);   // the previous token's casts left 8 bits
    for (auto& v : post) mpfr_set_prec(v, 256);
    for (int j = 0; j < 4; ++j) {
      sigmoid(pre[j], a[j]);
      mpfr_add_d(pre[j], pre[j], 1e-6, MPFR_RNDN);
      sigmoid(post[j], a[4 + j]);
      mpfr_mul_2ui(post[j], post[j], 1, MPFR_RNDN);
      mpfr_prec_round(post[j], 8, MPFR_RNDN);   // the cast to bf16
      mpfr_set(mx, a[8 + 4 * j], MPFR_RNDN);
      for (int k = 1; k < 4; ++k) mpfr_max(mx, mx, a[8 + 4 * j + k], MPFR_RNDN);
      mpfr_set_zero(acc, 1);
      for (int k = 0; k < 4; ++k) {
        mpfr_sub(C[4 * j + k], a[8 + 4 * j + k], mx, MPFR_RNDN);
        mpfr_exp(C[4 * j + k], C[4 * j + k], MPFR_RNDN);
        mpfr_add(acc, acc, C[4 * j + k], MPFR_RNDN);
      }
      for (int k = 0; k < 4; ++k) {
        mpfr_div(C[4 * j + k], C[4 * j + k], acc, MPFR_RNDN);
        mpfr_add_d(C[4 * j + k], C[4 * j + k], 1e-6, MPFR_RNDN);
      }
    }
    normalize(false);
    for (int64_t it = 1; it < iters; ++it) {
      normalize(true);
      normalize(false);
    }
    for (int i = 0; i < 16; ++i) {
      c[i] = mpfr_get_d(C[i], MPFR_RNDN);
      mpfr_prec_round(C[i], 8, MPFR_RNDN);   // the cast to bf16
    }
  }
  // x_in [H] and x_out [4,H] of one token.
  void mix(const double* xt, const double* fo, int64_t H, double* x_in, double* x_out) {
    for (int64_t h = 0; h < H; ++h) {
      mpfr_set_zero(acc, 1);
      for (int j = 0; j < 4; ++j) {
        mpfr_mul_d(t1, pre[j], xt[j * H + h], MPFR_RNDN);
        mpfr_add(acc, acc, t1, MPFR_RNDN);
      }
      x_in[h] = mpfr_get_d(acc, MPFR_RNDN);
      for (int k = 0; k < 4; ++k) {
        mpfr_mul_d(acc, post[k], fo[h], MPFR_RNDN);
        for (int j = 0; j < 4; ++j) {
          mpfr_mul_d(t1, C[4 * j + k], xt[j * H + h], MPFR_RNDN);   // C[j,k]: transposed
          mpfr_add(acc, acc, t1, MPFR_RNDN);
        }
        x_out[k * H + h] = mpfr_get_d(acc, MPFR_RNDN);
      }
    }
  }
};
Exact mpfr_mhc(int64_t T, int64_t H, int64_t iters, const std::vector<double>& x, const std::vector<double>& fo,
               const std::vector<double>& phi, const std::vector<double>& s, const std::vector<double>& b) {
  const int64_t D = n * H;
  Exact e{std::vector<double>(static_cast<size_t>(T * H)), std::vector<double>(static_cast<size_t>(T * D)),
          std::vector<double>(static_cast<size_t>(T * 16))};
  MpfrSite site;
  for (int64_t t = 0; t < T; ++t) {
    site.logits(x.data() + t * D, D, phi, s, b);
    site.maps(iters, e.C.data() + t * 16);
    site.mix(x.data() + t * D, fo.data() + t * H, H, e.x_in.data() + t * H, e.x_out.data() + t * D);
  }
  return e;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double ulps, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_LE(std::fabs(got[i] - want[i]), ulps * ulp(DType::f64, want[i])) << what << " element " << i << ": " << got[i]
                                                                             << " vs " << want[i];
}

// Random bf16 streams, f32 parameters, two settings: trained-like (s2 = 1) and peaked (s2 = 60:
// logits to +-200, rows near one-hot, the +1e-6 holding most of C). dd and MPFR agree with the MPFR
// computation to 1 ulp of a double (rounded to odd), f64 to 2^-40 relative (its Sinkhorn is plain
// double arithmetic; x_out's casts agree exactly).
TEST(MhcReference, TiersAgreeWithAnIndependentMpfrComputation) {
  const int64_t T = 3, H = 7, D = n * H;
  std::mt19937_64 gen(5);
  std::normal_distribution<double> nd;
  std::vector<double> xv(static_cast<size_t>(T * D)), fov(static_cast<size_t>(T * H)), phiv(static_cast<size_t>(24 * D)),
      bv(24);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = round_to(DType::bf16, (1 + static_cast<double>(i / H % n)) * nd(gen));
  for (double& v : fov) v = round_to(DType::bf16, nd(gen));
  for (double& v : phiv) v = static_cast<float>(nd(gen) / std::sqrt(static_cast<double>(D)));
  for (double& v : bv) v = static_cast<float>(nd(gen));
  const Tensor x = tensor(DType::bf16, {T, n, H}, xv), fo = tensor(DType::bf16, {T, H}, fov);
  const Tensor phi = tensor(DType::f32, {24, D}, phiv), bias = tensor(DType::f32, {24}, bv);
  for (double s2 : {1.0, 60.0}) {
    const std::vector<double> sv = {0.5, 0.5, s2};
    const Tensor scale = tensor(DType::f32, {3}, sv);
    const Exact e = mpfr_mhc(T, H, 20, xv, fov, phiv, sv, bv);
    for (Tier tier : kTiers) {
      const MhcReferenceResult r = mhc_reference(tier, {T, H, 20, DType::bf16}, x, fo, phi, scale, bias);
      const std::string what = std::string(tier_name(tier)) + " s2 " + std::to_string(s2);
      if (tier == Tier::f64) {
        for (size_t i = 0; i < e.C.size(); ++i) ASSERT_NEAR(r.C[i], e.C[i], 0x1p-40 * std::fabs(e.C[i])) << what << " C " << i;
        for (size_t i = 0; i < e.x_in.size(); ++i) ASSERT_NEAR(r.x_in[i], e.x_in[i], 0x1p-40 * 8) << what << " x_in " << i;
        expect_close(r.x_out, e.x_out, 2, what + " x_out");
      } else {
        expect_close(r.C, e.C, 1, what + " C");
        expect_close(r.x_in, e.x_in, 1, what + " x_in");
        expect_close(r.x_out, e.x_out, 1, what + " x_out");
      }
    }
  }
}

TEST(MhcReference, BadInputIsRefused) {
  const Tensor x(DType::bf16, {1, n, 2}), fo(DType::bf16, {1, 2}), phi(DType::f32, {24, 8}), scale(DType::f32, {3}),
      bias(DType::f32, {24});
  EXPECT_THROW(mhc_reference(Tier::f64, {1, 0, 20, DType::bf16}, x, fo, phi, scale, bias), InputError);   // H
  EXPECT_THROW(mhc_reference(Tier::f64, {1, 2, 0, DType::bf16}, x, fo, phi, scale, bias), InputError);   // iters
  EXPECT_THROW(mhc_reference(Tier::f64, {1, 3, 20, DType::bf16}, x, fo, phi, scale, bias), InputError);  // shapes
  const Tensor nan_x = tensor(DType::bf16, {1, n, 2}, {1, 2, 3, std::nan("")});
  try {
    mhc_reference(Tier::dd, {1, 2, 20, DType::bf16}, nan_x, fo, phi, scale, bias);
    FAIL() << "a NaN stream was accepted";
  } catch (const InputError& ex) {
    EXPECT_NE(std::string(ex.what()).find("'x' has a non-finite value at element 3"), std::string::npos) << ex.what();
  }
  try {
    mhc_reference(Tier::f64, {1, 2, 0, DType::bf16}, x, fo, phi, scale, bias);
    FAIL() << "iters = 0 was accepted";
  } catch (const InputError& ex) {
    EXPECT_NE(std::string(ex.what()).find("iters 0"), std::string::npos) << ex.what();
  }
}

}  // namespace
}  // namespace dg
