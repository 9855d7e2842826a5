// Certification of a reference tier against the next tier up (see certify.h).
#include "reference/certify.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "harness/cases/case.h"
#include "reference/kda.h"
#include "reference/real/dd.h"

namespace dg {

namespace {

// Walks the elements of (a, b) present in both and calls fn(|a - b|, |b|) with the difference formed
// exactly enough: each part difference is an exact TwoSum pair, summed with AccurateDWPlusDW (relative
// error about 2^-104 each, whatever the cancellation). Returns false when a NaN appears in only one.
template <class Fn>
bool for_each_diff(std::span<const double> a, std::span<const double> b, std::span<const double> a_tail,
                   std::span<const double> b_tail, Fn&& fn) {
  const size_t n = std::min(a.size(), b.size());
  const bool tails = a_tail.size() >= 2 * n && b_tail.size() >= 2 * n;
  for (size_t i = 0; i < n; ++i) {
    const bool na = std::isnan(a[i]), nb = std::isnan(b[i]);
    if (na || nb) {
      if (na != nb) return false;
      continue;
    }
    DD d = two_sum(a[i], -b[i]);
    double ref = b[i];
    if (tails) {
      d = dw_plus_dw(d, two_sum(a_tail[2 * i], -b_tail[2 * i]));
      d = dw_plus_dw(d, two_sum(a_tail[2 * i + 1], -b_tail[2 * i + 1]));
      ref += b_tail[2 * i];
    }
    fn(std::fabs(d.hi + d.lo), std::fabs(ref));
  }
  return true;
}

double to_bits(double ratio) {
  if (ratio == 0.0) return kAgreementCapBits;
  if (!(ratio < 1.0)) return 0.0;  // also NaN and Inf
  return std::min(kAgreementCapBits, -std::log2(ratio));
}

std::string heads_text(const std::vector<int64_t>& heads) {
  std::string s = "{";
  for (size_t i = 0; i < heads.size(); ++i) {
    if (i > 0) s.push_back(',');
    s.append(std::to_string(heads[i]));
  }
  s.push_back('}');
  return s;
}

}  // namespace

double tier_cost(Tier t) {
  switch (t) {
    case Tier::f64: return 0.4;
    case Tier::dd: return 1.0;
    case Tier::mpfr127: return 130.0;
    case Tier::mpfr256: return 200.0;
    case Tier::f128: return 100.0;
  }
  return 1.0;
}

double agreement_bits(std::span<const double> a, std::span<const double> b, std::span<const double> a_tail,
                      std::span<const double> b_tail) {
  long double diff2 = 0.0L, ref2 = 0.0L;  // long double: the squares keep their range
  const bool same_nans = for_each_diff(a, b, a_tail, b_tail, [&](double d, double r) {
    diff2 += static_cast<long double>(d) * d;
    ref2 += static_cast<long double>(r) * r;
  });
  if (!same_nans) return 0.0;
  if (diff2 == 0.0L) return kAgreementCapBits;
  if (ref2 == 0.0L) return 0.0;
  return to_bits(static_cast<double>(std::sqrt(diff2 / ref2)));
}

double agreement_bits_max_elem(std::span<const double> a, std::span<const double> b,
                               std::span<const double> a_tail, std::span<const double> b_tail) {
  double worst = 0.0;
  const bool same_nans = for_each_diff(a, b, a_tail, b_tail, [&](double d, double r) {
    if (d != 0.0) worst = std::max(worst, d / std::max(r, DBL_MIN));
  });
  if (!same_nans) return 0.0;
  return to_bits(worst);
}

bool certified_for(double ref_bits, DType output) {
  return ref_bits >= static_cast<double>(info(output).precision) + kCertifyMarginBits;
}

Certification certify_kda(Tier tier, const KdaParams& p, const TensorMap& in, int64_t budget_tokens_heads) {
  const std::optional<Tier> up = next_tier(tier);
  if (!up) throw InputError("certify: no tier above " + std::string(tier_name(tier)) + " to certify it against");
  Certification c;
  c.tier = tier;
  c.against = *up;

  const int64_t N = p.num_seqs();
  const int64_t tokens = p.cu_seqlens.empty() ? p.B * p.T : p.cu_seqlens.back();
  const double affordable = static_cast<double>(std::max<int64_t>(budget_tokens_heads, 0)) / tier_cost(*up);
  KdaReferenceOptions opt;
  opt.tails = true;
  opt.state_after_prefix = true;
  if (static_cast<double>(tokens) * static_cast<double>(p.HV) <= affordable) {
    c.sample = "full case";
  } else if (tokens > 0 && static_cast<double>(tokens) <= affordable) {
    const auto fit = static_cast<int64_t>(affordable / static_cast<double>(tokens));
    const int64_t nh = std::clamp<int64_t>(fit, 1, p.HV);
    for (int64_t i = 0; i < nh; ++i) opt.heads.push_back(i * p.HV / nh);
    c.sample = "all tokens, value heads " + heads_text(opt.heads);
  } else {
    opt.heads = {0};
    opt.max_tokens = std::max<int64_t>(1, static_cast<int64_t>(affordable / static_cast<double>(std::max<int64_t>(N, 1))));
    c.sample = "tokens [0," + std::to_string(opt.max_tokens) + ") of each sequence, value heads {0}";
  }

  const KdaReferenceResult lo = kda_reference(tier, p, in, opt);
  const KdaReferenceResult hi = kda_reference(*up, p, in, opt);
  c.ref_bits = std::min(agreement_bits(lo.o, hi.o, lo.o_tail, hi.o_tail),
                        agreement_bits(lo.ht, hi.ht, lo.ht_tail, hi.ht_tail));
  c.ref_bits_max_elem = std::min(agreement_bits_max_elem(lo.o, hi.o, lo.o_tail, hi.o_tail),
                                 agreement_bits_max_elem(lo.ht, hi.ht, lo.ht_tail, hi.ht_tail));
  return c;
}

}  // namespace dg
