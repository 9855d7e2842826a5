// The reference tiers: names and the certification ladder, and the tiers agreeing on KDA cases as
// their precisions say they should (f64 ~53 bits, dd ~106, mpfr127 ~127, mpfr256 as the yardstick).
#include "reference/real/tier.h"

#include <gtest/gtest.h>

#include <random>

#include "reference/certify.h"
#include "reference/kda.h"

namespace dg {
namespace {

TEST(Tiers, NamesParseAndLadder) {
  for (Tier t : {Tier::f64, Tier::dd, Tier::mpfr127, Tier::mpfr256, Tier::f128}) {
    EXPECT_EQ(parse_tier(tier_name(t)), t);
  }
  EXPECT_EQ(tier_name(Tier::mpfr127), "mpfr127");
  EXPECT_FALSE(parse_tier("mpfr128").has_value());
  EXPECT_FALSE(parse_tier("").has_value());
  EXPECT_EQ(tier_precision(Tier::f64), 53);
  EXPECT_EQ(tier_precision(Tier::dd), 106);
  EXPECT_EQ(tier_precision(Tier::mpfr127), 127);
  EXPECT_EQ(tier_precision(Tier::mpfr256), 256);
  EXPECT_EQ(tier_precision(Tier::f128), 113);
  EXPECT_EQ(next_tier(Tier::f64), Tier::dd);
  EXPECT_EQ(next_tier(Tier::dd), Tier::mpfr127);
  EXPECT_EQ(next_tier(Tier::mpfr127), Tier::mpfr256);
  EXPECT_EQ(next_tier(Tier::f128), Tier::mpfr127);
  EXPECT_FALSE(next_tier(Tier::mpfr256).has_value());
}

TensorMap inputs(const KdaParams& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  TensorMap in;
  auto fill = [&](const char* name, std::vector<int64_t> shape, double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    Tensor t(DType::f32, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, d(rng));
    in[name] = t;
  };
  fill("q", {p.B, p.T, p.H, p.K}, -1.0, 1.0);
  fill("k", {p.B, p.T, p.H, p.K}, -1.0, 1.0);
  fill("v", {p.B, p.T, p.HV, p.V}, -1.0, 1.0);
  if (p.gate == KdaGate::pregated) fill("g", {p.B, p.T, p.HV, p.K}, -0.2, 0.0);
  else fill("g", {p.B, p.T, p.HV, p.K}, -4.0, 4.0);
  fill("beta", {p.B, p.T, p.HV}, -2.0, 2.0);
  fill("A_log", {p.HV}, 0.0, 2.7);
  fill("dt_bias", {p.HV * p.K}, -6.9, -2.3);
  fill("h0", {p.num_seqs(), p.HV, p.K, p.V}, -1.0, 1.0);
  return in;
}

struct Bits {
  double o, ht;
};
Bits agreement(const KdaReferenceResult& a, const KdaReferenceResult& b) {
  return {agreement_bits(a.o, b.o, a.o_tail, b.o_tail), agreement_bits(a.ht, b.ht, a.ht_tail, b.ht_tail)};
}

KdaParams case_params(KdaGate gate) {
  KdaParams p;
  p.B = 1;
  p.T = 64;
  p.H = 1;
  p.HV = 2;
  p.K = 16;
  p.V = 16;
  p.gate = gate;
  p.beta = KdaBeta::sigmoid;
  p.has_h0 = true;
  return p;
}

TEST(Tiers, AgreeOnKdaAsTheirPrecisionsSay) {
  const KdaParams p = case_params(KdaGate::softplus);
  const TensorMap in = inputs(p, 42);
  KdaReferenceOptions opt;
  opt.tails = true;
  const KdaReferenceResult f64 = kda_reference(Tier::f64, p, in, opt);
  const KdaReferenceResult dd = kda_reference(Tier::dd, p, in, opt);
  const KdaReferenceResult m127 = kda_reference(Tier::mpfr127, p, in, opt);
  const KdaReferenceResult m256 = kda_reference(Tier::mpfr256, p, in, opt);
  const KdaReferenceResult f128 = kda_reference(Tier::f128, p, in, opt);
  const Bits b64 = agreement(f64, m256), bdd = agreement(dd, m256), b127 = agreement(m127, m256);
  const Bits b128 = agreement(f128, m256);
  std::printf("  bits vs mpfr256 (o, ht): f64 %.1f %.1f  dd %.1f %.1f  f128 %.1f %.1f  mpfr127 %.1f %.1f\n", b64.o,
              b64.ht, bdd.o, bdd.ht, b128.o, b128.ht, b127.o, b127.ht);
  for (double b : {b64.o, b64.ht}) {
    EXPECT_GE(b, 40.0);
    EXPECT_LE(b, 60.0);  // and not better than a double can be
  }
  for (double b : {bdd.o, bdd.ht}) {
    EXPECT_GE(b, 90.0);
    EXPECT_LE(b, 112.0);
  }
  for (double b : {b128.o, b128.ht}) {
    EXPECT_GE(b, 100.0);
    EXPECT_LE(b, 118.0);
  }
  for (double b : {b127.o, b127.ht}) {
    EXPECT_GE(b, 115.0);
    EXPECT_LT(b, kAgreementCapBits);  // 127 bits is not 256
  }
  // neighbours agree as well as the lower one allows
  EXPECT_GE(agreement(f64, dd).o, 40.0);
  EXPECT_GE(agreement(dd, m127).o, 90.0);
}

TEST(Tiers, EveryGateModeAgreesAcrossTiers) {
  // The gate's exp / log1p / sigmoid in dd against MPFR: dd keeps its ~100 bits in every mode.
  for (KdaGate gate : {KdaGate::pregated, KdaGate::softplus, KdaGate::lower_bound}) {
    KdaParams p = case_params(gate);
    p.T = 24;
    p.beta = KdaBeta::sigmoid2;
    const TensorMap in = inputs(p, 7);
    KdaReferenceOptions opt;
    opt.tails = true;
    const KdaReferenceResult dd = kda_reference(Tier::dd, p, in, opt);
    const KdaReferenceResult m256 = kda_reference(Tier::mpfr256, p, in, opt);
    opt.generic_kernels = true;
    const KdaReferenceResult dd_generic = kda_reference(Tier::dd, p, in, opt);
    EXPECT_GE(agreement(dd, m256).o, 90.0) << "gate " << static_cast<int>(gate);
    EXPECT_GE(agreement(dd, m256).ht, 90.0) << "gate " << static_cast<int>(gate);
    EXPECT_GE(agreement(dd_generic, m256).o, 90.0) << "gate " << static_cast<int>(gate);
  }
}

TEST(Tiers, LongerRunsKeepTheirBits) {
  // Near-zero decay (long memory): rounding errors accumulate instead of fading.
  KdaParams p = case_params(KdaGate::pregated);
  p.T = 512;
  p.HV = 1;
  TensorMap in = inputs(p, 3);
  Tensor g(DType::f32, {p.B, p.T, p.HV, p.K});
  for (int64_t i = 0; i < g.numel(); ++i) g.set(i, -1e-4);
  in["g"] = g;
  KdaReferenceOptions opt;
  opt.tails = true;
  const KdaReferenceResult f64 = kda_reference(Tier::f64, p, in, opt);
  const KdaReferenceResult dd = kda_reference(Tier::dd, p, in, opt);
  const KdaReferenceResult m127 = kda_reference(Tier::mpfr127, p, in, opt);
  EXPECT_GE(agreement(f64, m127).o, 40.0);
  EXPECT_GE(agreement(dd, m127).o, 90.0);
  EXPECT_GE(agreement(dd, m127).ht, 90.0);
}

}  // namespace
}  // namespace dg
