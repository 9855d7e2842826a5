// moe_router (reference/moe_router.h): a case's parameters, the decision margins of a token, and the
// op's measures, for the OpSpec, the regimes, candidates, mutants and tests.
//
// The outputs are a set and its weights, so bits are the wrong metric (DESIGN.md, "Metrics by kind
// of output"). The measures, per case, over its T tokens:
//
//   margin of a token   the reference's margins the decision depends on, from the stored inputs in
//                       double: sel_(k) - sel_(k+1) among the kept groups' experts (ranked by the
//                       tie rule), and with groups the topk_group-th minus the next group score; the
//                       token's margin is the smaller (+inf where there is no next)
//   tol of a token      32 u (1 + max_e |s_e + b_e|), u the unit roundoff of the candidate's weight
//                       format (f32: 2^-24). An f32 kernel's s = sigmoid(z) carries <= ~3 u (exp,
//                       add, divide), s + b one more rounding at |s + b|, a group score two roundings
//                       more: a margin moves by < 16 u (1 + max|s + b|), so 32 u is twice that
//   flips_wide          tokens whose expert set differs from the reference's although their margin
//                       is wider than tol (limit 0: an honest kernel never flips there)
//   ties                tokens where the candidate selected expert j and not an expert i < j with the
//                       same logit and bias (an exact tie in the inputs decided against the rule; limit 0)
//   invalid_ids         tokens whose ids are not k distinct integers in [0, E) (limit 0)
//   weight_err          max |w_c - w_r| / max(|w_r|, the format's least normal) over the tokens whose
//                       set agrees, slots matched by expert id (a relative measure, judged against the
//                       base's and the naive's, floor 16 u; and limit 4096 u: 12 bits in f32, the
//                       policy's f32 floor, so verify fails a kernel whose weights are far off)
//   set_agreement       fraction of tokens with exactly the reference's set (report only)
//   flip_rate.margin<2^-20, <2^-16, <2^-12, >=2^-12
//                       fraction of the tokens of each margin bucket whose set differs (report only)
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "harness/cases/case.h"
#include "reference/moe_router.h"

namespace dg {

MoeRouterParams moe_router_params(const Case& c);

// One token's ranking in double from its logits row z [E] and the bias b [E], by the tie rule.
struct MoeRouterRank {
  std::vector<double> sel;            // [E] s + b
  std::vector<int64_t> groups;        // every group, ranked by group score
  std::vector<double> group_score;    // [n_group]
  std::vector<int64_t> experts;       // the kept groups' experts, ranked by sel (the first k are the set)
  double expert_margin = std::numeric_limits<double>::infinity();
  double group_margin = std::numeric_limits<double>::infinity();
  double margin() const { return expert_margin < group_margin ? expert_margin : group_margin; }
};
MoeRouterRank moe_router_rank(const MoeRouterParams& p, const double* z, const double* b);

// The op's measures of one candidate output (see the head comment). ids and weights [T,k] as doubles;
// `u` the unit roundoff and `tiny` the least normal of the candidate's weight format.
struct MoeRouterMeasures {
  int64_t tokens = 0, agree = 0, flips = 0, flips_wide = 0, ties = 0, invalid_ids = 0;
  double weight_err = 0;              // NaN weights on an agreeing token count as +inf
  double widest_flip_margin = 0;      // the largest margin among the flipped tokens (0: none)
  static constexpr int kBuckets = 4;  // margin < 2^-20, < 2^-16, < 2^-12, >= 2^-12
  int64_t bucket_tokens[kBuckets] = {}, bucket_flips[kBuckets] = {};
  static const char* bucket_name(int i);
};
MoeRouterMeasures moe_router_measure(const MoeRouterParams& p, const std::vector<double>& logits,
                                     const std::vector<double>& bias, const std::vector<double>& ref_ids,
                                     const std::vector<double>& ref_weights, const std::vector<double>& ids,
                                     const std::vector<double>& weights, double u, double tiny);

}  // namespace dg
