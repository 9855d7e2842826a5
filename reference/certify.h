// Certification of a reference tier: how many bits its result shares with the next tier up
// (f64 -> dd -> mpfr127 -> mpfr256), measured on the full case or on a documented sample.
//
// This is the two-precision check of notes/precision-arithmetic.md section 4: |r_tier - r_up|
// estimates the tier's error when the higher tier is much better. It is a strong regression check,
// not a proof (a cancellation both tiers miss would go unseen). The comparison uses each tier's
// full-precision values (kda_reference with tails), not the doubles rounded to odd, so dd and MPFR
// tiers are measured far below a double's precision.
//
// A verdict table must say so instead of printing a verdict when the reference is not at least
// kCertifyMarginBits better than the candidate's output format (certified_for).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "harness/core/dtype.h"
#include "harness/core/tensor.h"
#include "reference/kda_params.h"
#include "reference/real/tier.h"

namespace dg {

inline constexpr double kAgreementCapBits = 128.0;  // reported when the results are identical
inline constexpr double kCertifyMarginBits = 20.0;

struct Certification {
  Tier tier = Tier::f64;
  Tier against = Tier::dd;
  std::string sample;              // "full case", "all tokens, value heads {0,2}", or
                                   // "tokens [0,256) of each sequence, value heads {0}"
  double ref_bits = 0.0;           // min over outputs (o, ht) of -log2(||r_tier - r_up||_2 / ||r_up||_2)
                                   // over the sampled elements; kAgreementCapBits when identical
  double ref_bits_max_elem = 0.0;  // min over outputs of -log2(max_i |r_tier - r_up|_i / max(|r_up|_i, tiny))
};

// Cost of one token-head at each tier in dd token-heads (one core, bench/reference_bench.cpp at
// K = V = 128, measured when these were set: f64 about 115k tokens/s, dd 48k, mpfr127 370, mpfr256
// 250; README has today's figures).
double tier_cost(Tier t);

// Recomputes the case at next_tier(tier) and at `tier`, with tails, and compares them. The budget
// is in dd token-heads of this case's K and V: when (total tokens) * HV * tier_cost(up) fits, the
// full case is compared; otherwise a sample: evenly spaced value heads over all tokens when at least
// one head fits, else value head 0 over a prefix of every sequence (the state after the prefix is
// compared as ht). Throws InputError for a tier without a tier above it (mpfr256) and whatever
// kda_reference throws.
Certification certify_kda(Tier tier, const KdaParams& p, const TensorMap& in, int64_t budget_tokens_heads);

// Agreement in bits of a (the tier's values) with b (the higher tier's): -log2(||a - b|| / ||b||),
// capped to [0, kAgreementCapBits] (the cap when identical). Elements NaN in both are outside the
// sample and skipped; NaN in only one of them gives 0 bits. Optional tails (two doubles per
// element, as KdaReferenceResult::o_tail) extend each element to a + tail[2i] + tail[2i+1]; the
// differences are formed in double-double from exact pairs, so they keep their accuracy far below
// a double's precision.
double agreement_bits(std::span<const double> a, std::span<const double> b,
                      std::span<const double> a_tail = {}, std::span<const double> b_tail = {});
// -log2(max_i |a_i - b_i| / max(|b_i|, DBL_MIN)), same conventions.
double agreement_bits_max_elem(std::span<const double> a, std::span<const double> b,
                               std::span<const double> a_tail = {}, std::span<const double> b_tail = {});

// True when a reference with ref_bits of agreement is at least kCertifyMarginBits better than the
// output format's precision (bf16: 8 + 20 = 28 bits; f32: 44; f64: 73).
bool certified_for(double ref_bits, DType output);

}  // namespace dg
