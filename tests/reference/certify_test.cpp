// Certification: the agreement measure, the 20-bit rule, sampling under a budget, and a deliberately
// low-precision reference (values rounded to f32) being caught.
#include "reference/certify.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "harness/cases/case.h"
#include "reference/kda.h"

namespace dg {
namespace {

TEST(AgreementBits, Basics) {
  const std::vector<double> b = {1.0, -2.0, 0.5, 3.0};
  EXPECT_EQ(agreement_bits(b, b), kAgreementCapBits);
  EXPECT_EQ(agreement_bits_max_elem(b, b), kAgreementCapBits);
  std::vector<double> a = b;
  for (double& x : a) x *= 1.0 + std::ldexp(1.0, -30);
  EXPECT_NEAR(agreement_bits(a, b), 30.0, 0.01);
  EXPECT_NEAR(agreement_bits_max_elem(a, b), 30.0, 0.01);
  // one element off by 2^-20 relative: normwise sees it diluted, elementwise sees it whole
  a = b;
  a[2] *= 1.0 + std::ldexp(1.0, -20);
  EXPECT_GT(agreement_bits(a, b), 22.0);
  EXPECT_NEAR(agreement_bits_max_elem(a, b), 20.0, 0.01);
  // completely wrong gives 0, never negative
  EXPECT_EQ(agreement_bits(std::vector<double>{5.0}, std::vector<double>{1.0}), 0.0);
  EXPECT_EQ(agreement_bits(std::vector<double>{1.0}, std::vector<double>{0.0}), 0.0);
}

TEST(AgreementBits, NanMeansOutsideTheSample) {
  const std::vector<double> a = {1.0, NAN, 2.0}, b = {1.0, NAN, 2.0}, c = {1.0, 7.0, 2.0};
  EXPECT_EQ(agreement_bits(a, b), kAgreementCapBits);
  EXPECT_EQ(agreement_bits(a, c), 0.0);  // NaN in only one: a real mismatch
  EXPECT_EQ(agreement_bits_max_elem(c, a), 0.0);
}

TEST(AgreementBits, TailsMeasureBelowADouble) {
  // a = 1 + 2^-80 (head 1, tail 2^-80), b = 1: 80 bits, invisible in the heads alone.
  const std::vector<double> a = {1.0, 3.0}, b = {1.0, 3.0};
  const std::vector<double> a_tail = {std::ldexp(1.0, -80), 0.0, 3 * std::ldexp(1.0, -80), 0.0};
  const std::vector<double> b_tail = {0.0, 0.0, 0.0, 0.0};
  EXPECT_EQ(agreement_bits(a, b), kAgreementCapBits);
  EXPECT_NEAR(agreement_bits(a, b, a_tail, b_tail), 80.0, 0.01);
  EXPECT_NEAR(agreement_bits_max_elem(a, b, a_tail, b_tail), 80.0, 0.01);
  // heads that differ by one ulp with tails making up for it: the values are equal
  const std::vector<double> h1 = {1.0 + std::ldexp(1.0, -52)}, h2 = {1.0};
  const std::vector<double> t1 = {-std::ldexp(1.0, -52), 0.0}, t2 = {0.0, 0.0};
  EXPECT_EQ(agreement_bits(h1, h2, t1, t2), kAgreementCapBits);
}

TEST(CertifiedFor, TwentyBitsAboveTheFormat) {
  EXPECT_TRUE(certified_for(44.0, DType::f32));
  EXPECT_FALSE(certified_for(43.9, DType::f32));
  EXPECT_TRUE(certified_for(28.0, DType::bf16));
  EXPECT_FALSE(certified_for(27.0, DType::bf16));
  EXPECT_TRUE(certified_for(31.0, DType::f16));
  EXPECT_FALSE(certified_for(60.0, DType::f64));
  EXPECT_TRUE(certified_for(100.0, DType::f64));
}

KdaParams small_case() {
  KdaParams p;
  p.B = 2;
  p.T = 48;
  p.H = 1;
  p.HV = 2;
  p.K = 12;
  p.V = 10;
  p.gate = KdaGate::softplus;
  p.beta = KdaBeta::sigmoid;
  return p;
}

TensorMap inputs(const KdaParams& p) {
  std::mt19937_64 rng(11);
  TensorMap in;
  auto fill = [&](const char* name, std::vector<int64_t> shape, double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    Tensor t(DType::bf16, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, d(rng));
    in[name] = t;
  };
  fill("q", {p.B, p.T, p.H, p.K}, -1.0, 1.0);
  fill("k", {p.B, p.T, p.H, p.K}, -1.0, 1.0);
  fill("v", {p.B, p.T, p.HV, p.V}, -1.0, 1.0);
  fill("g", {p.B, p.T, p.HV, p.K}, -3.0, 3.0);
  fill("beta", {p.B, p.T, p.HV}, -2.0, 2.0);
  fill("A_log", {p.HV}, 0.0, 2.7);
  fill("dt_bias", {p.HV * p.K}, -6.9, -2.3);
  return in;
}

TEST(CertifyKda, FullCaseWithinBudget) {
  const KdaParams p = small_case();
  const TensorMap in = inputs(p);
  const Certification dd = certify_kda(Tier::dd, p, in, 1'000'000'000);
  EXPECT_EQ(dd.tier, Tier::dd);
  EXPECT_EQ(dd.against, Tier::mpfr127);
  EXPECT_EQ(dd.sample, "full case");
  EXPECT_GE(dd.ref_bits, 90.0);
  EXPECT_GE(dd.ref_bits_max_elem, 60.0);
  EXPECT_TRUE(certified_for(dd.ref_bits, DType::f32));
  EXPECT_TRUE(certified_for(dd.ref_bits, DType::f64));
  const Certification f64 = certify_kda(Tier::f64, p, in, 1'000'000'000);
  EXPECT_EQ(f64.against, Tier::dd);
  EXPECT_GE(f64.ref_bits, 40.0);
  EXPECT_LE(f64.ref_bits, 60.0);
  EXPECT_TRUE(certified_for(f64.ref_bits, DType::bf16));
  EXPECT_FALSE(certified_for(f64.ref_bits, DType::f64));
  const Certification m127 = certify_kda(Tier::mpfr127, p, in, 1'000'000'000);
  EXPECT_EQ(m127.against, Tier::mpfr256);
  EXPECT_GE(m127.ref_bits, 115.0);
  EXPECT_THROW(certify_kda(Tier::mpfr256, p, in, 1'000'000'000), InputError);
}

TEST(CertifyKda, SamplesUnderASmallBudget) {
  const KdaParams p = small_case();  // 96 tokens x 2 value heads
  const TensorMap in = inputs(p);
  // one head over all tokens fits at mpfr127 (130 dd token-heads each), two do not
  const Certification heads = certify_kda(Tier::dd, p, in, 96 * 130);
  EXPECT_EQ(heads.sample, "all tokens, value heads {0}");
  EXPECT_GE(heads.ref_bits, 90.0);
  // 20 token-heads at mpfr127: a prefix of 10 tokens of each of the 2 sequences, head 0
  const Certification prefix = certify_kda(Tier::dd, p, in, 20 * 130);
  EXPECT_EQ(prefix.sample, "tokens [0,10) of each sequence, value heads {0}");
  EXPECT_GE(prefix.ref_bits, 90.0);
}

TEST(CertifyKda, CatchesALowPrecisionReference) {
  // A "reference" whose values were rounded to f32 agrees with mpfr127 to about 24 bits: not
  // certified for f32 (needs 44) nor bf16 (needs 28), while the real dd result is.
  const KdaParams p = small_case();
  const TensorMap in = inputs(p);
  KdaReferenceOptions opt;
  opt.tails = true;
  const KdaReferenceResult dd = kda_reference(Tier::dd, p, in, opt);
  const KdaReferenceResult up = kda_reference(Tier::mpfr127, p, in, opt);
  std::vector<double> rounded = dd.o;
  for (double& x : rounded) x = static_cast<double>(static_cast<float>(x));
  const double low = agreement_bits(rounded, up.o, {}, up.o_tail);
  EXPECT_GT(low, 20.0);
  EXPECT_LT(low, 27.0);
  EXPECT_FALSE(certified_for(low, DType::f32));
  EXPECT_FALSE(certified_for(low, DType::bf16));
  EXPECT_LT(agreement_bits_max_elem(rounded, up.o, {}, up.o_tail), 25.0);
  const double real = agreement_bits(dd.o, up.o, dd.o_tail, up.o_tail);
  EXPECT_TRUE(certified_for(real, DType::f32));
}

}  // namespace
}  // namespace dg
