// Reference of the token sampler of vLLM V1 (notes/model-ops.md sections 1.8 and 5), written once over
// a scalar Real and run in the tiers of reference/real/tier.h. Per row b of logits l [B,V] (the lm_head
// output, bf16 or f32) with injected uniforms u [B,V] (f32, each in (0,1)):
//
//   greedy      T < 1e-5: the token is argmax_i l_i (the lowest index among equal logits); u unused
//   temperature s_i = fl32(l_i / fl32(T)): production divides in f32, and that rounding defines the
//               op's values (every filter below compares these f32 values; the division of two f32
//               numbers in double rounds correctly to f32, so s is exact in every tier)
//   min-p       (min_p > 0) keep i when p_i >= min_p * max p, i.e. exp(s_i - m) >= min_p, m = max s
//   top-k       (top_k > 0) keep i when s_i >= the top_k-th largest s (boundary ties keep more than k);
//               min-p keeps the largest values, so top-k after min-p keeps both filters' intersection
//   top-p       (top_p < 1) the kept tokens in ascending order of s (equal s: the HIGHER index first,
//               so ties are dropped from the high index down), q = their softmax, c_j = q_1 + ... + q_j;
//               token j is dropped when c_j <= 1 - top_p, the last (largest) one never
//   softmax     p_i = exp(s_i - m) / Z over the kept tokens, Z summed in the ascending order above
//   draw        E_i = -log(u_i); the token is argmax over the kept i of p_i / E_i (the exponential race,
//               Gumbel-max); equal race values: the lower index
//
// Tie rules (the op's definition where values are exactly equal): greedy and the race pick the lower
// index; top-k keeps every value equal to the k-th; at the top-p cut a group of equal s straddling the
// cut is dropped from its highest index down. Production sorts with torch.sort (not stable), so a
// kernel may drop another member of such a group: the op's measures (harness/ops/sampler.h) count a
// token of a straddling group as undecided, never as a wide flip.
// Every comparison and sum is made in the tier's arithmetic; the output is the token id per row (an
// exact double). Cost: O(V log V) per row (one sort), V exps and V logs.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/tensor.h"
#include "reference/real/tier.h"

namespace dg {

struct SamplerParams {
  int64_t B = 1, V = 32000, top_k = 0;
  double temperature = 1.0, top_p = 1.0, min_p = 0.0;
  bool greedy() const { return temperature < kGreedyBelow; }
  static constexpr double kGreedyBelow = 1e-5;
};

// Throws InputError naming the constraint broken.
void sampler_check_params(const SamplerParams& p);

// s_i = fl32(l_i / fl32(T)) (the f32 temperature, exact in double).
double sampler_scaled(double logit, double temperature);

// The token of every row [B] as exact doubles. Throws InputError on bad parameters, mis-shaped
// tensors, non-finite logits or uniforms outside (0, 1).
std::vector<double> sampler_reference(Tier tier, const SamplerParams& p, const Tensor& logits, const Tensor& uniforms);

// The probabilities of every row [B,V] (0 outside the kept set; greedy rows: 1 at the argmax), rounded
// to odd: the distribution the race draws from, for the distribution test of samplers that draw
// differently (harness/ops/sampler.h, sampler_tv_plan).
std::vector<double> sampler_probabilities(Tier tier, const SamplerParams& p, const Tensor& logits);

}  // namespace dg
