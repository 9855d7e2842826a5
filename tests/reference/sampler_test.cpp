// The sampler reference (reference/sampler.h): hand-derived rows (greedy's tie rule, top-k keeping its
// boundary ties, the top-p cut at an exact cumsum and its tie rule, min-p against the probabilities,
// the f32 temperature), every tier against the rule computed here with MPFR at 256 bits, and bad
// parameters and inputs.
#include "reference/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <mpfr.h>

#include "harness/cases/case.h"

namespace dg {
namespace {

const Tier kTiers[] = {Tier::f64, Tier::dd, Tier::mpfr127, Tier::mpfr256};

Tensor mat(const std::vector<double>& v, int64_t rows, DType dt = DType::f64) {
  Tensor t(dt, {rows, static_cast<int64_t>(v.size()) / rows});
  for (size_t i = 0; i < v.size(); ++i) t.set(static_cast<int64_t>(i), v[i]);
  return t;
}
SamplerParams params(int64_t B, int64_t V, double T, int64_t k, double top_p, double min_p) {
  SamplerParams p;
  p.B = B, p.V = V, p.temperature = T, p.top_k = k, p.top_p = top_p, p.min_p = min_p;
  return p;
}
// Uniforms that make token `winner` win the race among every kept token: E tiny there, 1 elsewhere.
std::vector<double> favour(int64_t V, int64_t winner) {
  std::vector<double> u(static_cast<size_t>(V), std::exp(-1.0));
  u[static_cast<size_t>(winner)] = 1.0 - 0x1p-24;
  return u;
}
double token(Tier tier, const SamplerParams& p, const std::vector<double>& l, const std::vector<double>& u) {
  return sampler_reference(tier, p, mat(l, 1), mat(u, 1)).at(0);
}

TEST(SamplerReference, GreedyTakesTheLowestIndexAmongEqualLogits) {
  for (Tier tier : kTiers) {
    EXPECT_EQ(token(tier, params(1, 5, 0.0, 0, 1, 0), {1, 3, 2, 3, 0}, favour(5, 3)), 1.0) << tier_name(tier);
    EXPECT_EQ(token(tier, params(1, 5, 0.9e-5, 0, 1, 0), {1, 3, 2, 3.5, 0}, favour(5, 0)), 3.0) << tier_name(tier);
  }
}

// top_k = 2 over [3, 2, 2, 2, 1, 0]: the 2nd largest is 2, so tokens 0..3 are kept (four, not two).
TEST(SamplerReference, TopKKeepsItsBoundaryTies) {
  const std::vector<double> l = {3, 2, 2, 2, 1, 0};
  for (Tier tier : kTiers) {
    EXPECT_EQ(token(tier, params(1, 6, 1.0, 2, 1, 0), l, favour(6, 3)), 3.0) << tier_name(tier);
    EXPECT_EQ(token(tier, params(1, 6, 1.0, 2, 1, 0), l, favour(6, 4)), 0.0) << tier_name(tier);   // 4 dropped
  }
}

// Four equal logits: q = 1/4 each, exact in every tier; ascending order 3, 2, 1, 0 (the higher index
// first among equals) has cumsum 1/4, 1/2, 3/4, 1. top_p = 0.5 drops cumsum <= 1/2 (tokens 3 and 2,
// the cut exactly at a cumsum: <= drops it); top_p = 0.75 drops token 3 only.
TEST(SamplerReference, TopPDropsCumsumAtMostOneMinusPFromTheHighIndexOfATie) {
  const std::vector<double> l = {0, 0, 0, 0};
  // Built element by element: GCC 12.2 at -O3 -march=native (AVX-512) turns the braced list
  // {0.5, 0.5, 0.0, 0.0} into four 0.5s (reproduced outside driftgate; not at -O2 or without -march).
  std::vector<double> want_half(4, 0.0), want_greedy(4, 0.0);
  want_half[0] = want_half[1] = 0.5;
  want_greedy[1] = 1.0;
  for (Tier tier : kTiers) {
    EXPECT_EQ(token(tier, params(1, 4, 1.0, 0, 0.5, 0), l, favour(4, 2)), 0.0) << tier_name(tier);
    EXPECT_EQ(token(tier, params(1, 4, 1.0, 0, 0.5, 0), l, favour(4, 1)), 1.0) << tier_name(tier);
    EXPECT_EQ(token(tier, params(1, 4, 1.0, 0, 0.75, 0), l, favour(4, 2)), 2.0) << tier_name(tier);
    EXPECT_EQ(token(tier, params(1, 4, 1.0, 0, 0.75, 0), l, favour(4, 3)), 0.0) << tier_name(tier);
    const std::vector<double> half = sampler_probabilities(tier, params(1, 4, 1.0, 0, 0.5, 0), mat(l, 1));
    const std::vector<double> greedy = sampler_probabilities(tier, params(1, 4, 0.0, 0, 0.5, 0), mat({0, 2, 2, 1}, 1));
    EXPECT_EQ(half, want_half) << tier_name(tier);
    EXPECT_EQ(greedy, want_greedy) << tier_name(tier);   // greedy: all of it on the first largest
    // a tiny top_p keeps the largest token only (the last is never dropped)
    EXPECT_EQ(token(tier, params(1, 4, 1.0, 0, 1e-6, 0), {0, 1, 0, 0}, favour(4, 3)), 1.0) << tier_name(tier);
  }
}

// min_p = e^-2: keeps p_i / max p = e^(l_i - max l) >= e^-2, i.e. l_i >= max l - 2 (probabilities,
// not logits: against the logits, 0.135 * 5 = 0.68, token 2 = 2.9 would be kept).
TEST(SamplerReference, MinPComparesProbabilitiesWithTheMaximum) {
  const std::vector<double> l = {5, 3.5, 2.9, 0};
  for (Tier tier : kTiers) {
    const SamplerParams p = params(1, 4, 1.0, 0, 1, std::exp(-2.0));
    EXPECT_EQ(token(tier, p, l, favour(4, 1)), 1.0) << tier_name(tier);
    EXPECT_EQ(token(tier, p, l, favour(4, 2)), 0.0) << tier_name(tier);
  }
}

// The temperature divides in f32: l / T rounded to f32 is what the filters compare. At T = 1.05 two
// adjacent f32 logits near 1.9 (0.95 of an ulp apart after the division) round to the same f32
// quotient, so top_k = 1 keeps both: the lower one can win the race.
TEST(SamplerReference, TheTemperatureRoundsToF32) {
  float a = 1.9f, b = std::nextafter(a, 2.0f);
  for (int i = 0; i < 200 && sampler_scaled(a, 1.05) != sampler_scaled(b, 1.05); ++i) a = b, b = std::nextafter(b, 2.0f);
  ASSERT_EQ(sampler_scaled(a, 1.05), sampler_scaled(b, 1.05));
  EXPECT_NE(static_cast<double>(a) / static_cast<double>(static_cast<float>(1.05)),
            static_cast<double>(b) / static_cast<double>(static_cast<float>(1.05)));
  EXPECT_EQ(sampler_scaled(b, 1.0), b);
  for (Tier tier : kTiers) EXPECT_EQ(token(tier, params(1, 3, 1.05, 1, 1, 0), {b, a, 0}, favour(3, 1)), 1.0) << tier_name(tier);
}

// The rule computed here in MPFR at 256 bits, independently of reference/sampler.cpp.
int64_t mpfr_token(const SamplerParams& p, const double* l, const double* u) {
  const size_t V = static_cast<size_t>(p.V);
  std::vector<double> s(V);
  for (size_t i = 0; i < V; ++i) s[i] = static_cast<float>(l[i] / static_cast<double>(static_cast<float>(p.temperature)));
  const double m = *std::max_element(s.begin(), s.end());
  std::vector<double> sorted = s;
  std::sort(sorted.rbegin(), sorted.rend());
  const double kth = p.top_k > 0 ? sorted[static_cast<size_t>(p.top_k - 1)] : -INFINITY;
  mpfr_t e[64], z, c, t, best;
  for (size_t i = 0; i < V; ++i) mpfr_init2(e[i], 256), mpfr_set_d(e[i], s[i] - m, MPFR_RNDN), mpfr_exp(e[i], e[i], MPFR_RNDN);
  mpfr_inits2(256, z, c, t, best, static_cast<mpfr_ptr>(nullptr));
  std::vector<int64_t> order;
  for (size_t i = 0; i < V; ++i)
    if (s[i] >= kth && (p.min_p == 0 || mpfr_cmp_d(e[i], p.min_p) >= 0)) order.push_back(static_cast<int64_t>(i));
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return s[a] < s[b] || (s[a] == s[b] && a > b); });
  mpfr_set_zero(z, 1);
  for (int64_t i : order) mpfr_add(z, z, e[i], MPFR_RNDN);
  std::vector<char> keep(V, 0);
  for (int64_t i : order) keep[static_cast<size_t>(i)] = 1;
  mpfr_set_zero(c, 1);
  for (size_t j = 0; p.top_p < 1 && j + 1 < order.size(); ++j) {
    mpfr_div(t, e[order[j]], z, MPFR_RNDN);
    mpfr_add(c, c, t, MPFR_RNDN);
    mpfr_d_sub(t, 1.0, c, MPFR_RNDN);   // 1 - c >= p  <=>  c <= 1 - p
    if (mpfr_cmp_d(t, p.top_p) < 0) break;
    keep[static_cast<size_t>(order[j])] = 0;
  }
  int64_t win = -1;
  for (size_t i = 0; i < V; ++i) {
    if (!keep[i]) continue;
    mpfr_set_d(t, u[i], MPFR_RNDN);
    mpfr_log(t, t, MPFR_RNDN);
    mpfr_div(t, e[i], t, MPFR_RNDN);
    mpfr_neg(t, t, MPFR_RNDN);   // e_i / E_i: the common 1 / Z leaves the argmax unchanged
    if (win < 0 || mpfr_greater_p(t, best)) win = static_cast<int64_t>(i), mpfr_set(best, t, MPFR_RNDN);
  }
  for (size_t i = 0; i < V; ++i) mpfr_clear(e[i]);
  mpfr_clears(z, c, t, best, static_cast<mpfr_ptr>(nullptr));
  return win;
}

TEST(SamplerReference, EveryTierAgreesWithMpfrComputedHere) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> n(0.0, 2.0);
  std::uniform_real_distribution<double> unif(0.001, 0.999);
  const int64_t B = 24, V = 48;
  std::vector<double> l(static_cast<size_t>(B * V)), u(l.size());
  for (double& x : l) x = static_cast<float>(n(rng));
  for (double& x : u) x = static_cast<float>(unif(rng));
  for (const SamplerParams& p : {params(B, V, 0.7, 5, 0.9, 0.05), params(B, V, 1.0, 0, 0.5, 0), params(B, V, 1.3, 10, 1, 0.2),
                                 params(B, V, 1.0, 0, 1, 0)}) {
    std::vector<double> want(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) want[static_cast<size_t>(b)] = static_cast<double>(mpfr_token(p, &l[b * V], &u[b * V]));
    for (Tier tier : kTiers)
      EXPECT_EQ(sampler_reference(tier, p, mat(l, B, DType::f32), mat(u, B, DType::f32)), want)
          << tier_name(tier) << " k=" << p.top_k << " p=" << p.top_p << " min_p=" << p.min_p;
  }
}

TEST(SamplerReference, BadParametersAndInputsAreRefused) {
  const Tensor l = mat({1, 2, 3}, 1), u = mat({0.5, 0.5, 0.5}, 1);
  EXPECT_THROW(sampler_reference(Tier::f64, params(1, 3, 1, 0, 0.0, 0), l, u), InputError);    // top_p = 0
  EXPECT_THROW(sampler_reference(Tier::f64, params(1, 3, 1, 0, 1.5, 0), l, u), InputError);    // top_p > 1
  EXPECT_THROW(sampler_reference(Tier::f64, params(1, 3, 1, -1, 1, 0), l, u), InputError);     // top_k < 0
  EXPECT_THROW(sampler_reference(Tier::f64, params(1, 3, 1, 4, 1, 0), l, u), InputError);      // top_k > V
  EXPECT_THROW(sampler_reference(Tier::f64, params(1, 3, 1, 0, 1, 1.5), l, u), InputError);    // min_p > 1
  EXPECT_THROW(sampler_reference(Tier::f64, params(1, 3, -1, 0, 1, 0), l, u), InputError);     // T < 0
  EXPECT_THROW(sampler_reference(Tier::f64, params(1, 4, 1, 0, 1, 0), l, u), InputError);      // shape
  EXPECT_THROW(sampler_reference(Tier::f64, params(1, 3, 1, 0, 1, 0), l, mat({0.5, 0.0, 0.5}, 1)), InputError);
  EXPECT_THROW(sampler_reference(Tier::f64, params(1, 3, 1, 0, 1, 0), l, mat({0.5, 1.0, 0.5}, 1)), InputError);
  EXPECT_THROW(sampler_reference(Tier::f64, params(1, 3, 1, 0, 1, 0), mat({1, NAN, 3}, 1), u), InputError);
  try {
    sampler_reference(Tier::f64, params(1, 3, 1, 0, 1.5, 0), l, u);
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("top_p must be in (0, 1]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dg
