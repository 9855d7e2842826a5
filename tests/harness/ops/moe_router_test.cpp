// The measures of moe_router (harness/ops/moe_router.h) on hand-made candidate outputs: a set flip at
// a wide margin counted, one at a narrow margin allowed, a tie decided against the rule counted, a
// group flip judged by the group margin, weights matched by expert id in any slot order, invalid ids.
#include "harness/ops/moe_router.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dg {
namespace {

constexpr double kU = 0x1p-24, kTiny = 0x1p-126;

double logit(double s) { return std::log(s / (1 - s)); }

MoeRouterParams params(int64_t T, int64_t E, int64_t k, int64_t ng = 1, int64_t tg = 1) {
  MoeRouterParams p;
  p.T = T, p.E = E, p.k = k, p.n_group = ng, p.topk_group = tg, p.renorm = false, p.rsf = 1.0;
  return p;
}

// One token of 4 experts with scores s (bias zero), k = 2: the reference route is {0, 1}, weights s.
struct OneToken {
  MoeRouterParams p = params(1, 4, 2);
  std::vector<double> z, b = std::vector<double>(4, 0.0), ref_ids = {0, 1}, ref_w;
  explicit OneToken(const std::vector<double>& s) {
    for (double x : s) z.push_back(logit(x));
    ref_w = {s[0], s[1]};
  }
  MoeRouterMeasures measure(const std::vector<double>& ids, const std::vector<double>& w) const {
    return moe_router_measure(p, z, b, ref_ids, ref_w, ids, w, kU, kTiny);
  }
};

TEST(MoeRouterMeasures, AFlipAtAWideMarginIsCounted) {
  const OneToken t({0.9, 0.6, 0.5, 0.1});   // margin 0.1 between the 2nd and 3rd
  const MoeRouterMeasures m = t.measure({0, 2}, {0.9, 0.5});
  EXPECT_EQ(m.flips, 1);
  EXPECT_EQ(m.flips_wide, 1);
  EXPECT_EQ(m.agree, 0);
  EXPECT_EQ(m.bucket_flips[3], 1);   // margin >= 2^-12
  EXPECT_EQ(m.weight_err, 0.0);      // no agreeing token: no weight judged
}

TEST(MoeRouterMeasures, AFlipAtANarrowMarginIsAllowed) {
  const OneToken t({0.9, 0.6, 0.6 - 0x1p-26, 0.1});   // margin ~ 2^-26 < tol = 32 * 2^-24 * 1.9
  const MoeRouterMeasures m = t.measure({2, 0}, {0.6, 0.9});
  EXPECT_EQ(m.flips, 1);
  EXPECT_EQ(m.flips_wide, 0);
  EXPECT_EQ(m.bucket_flips[0], 1);
  EXPECT_GT(m.widest_flip_margin, 0.0);
  EXPECT_LT(m.widest_flip_margin, 0x1p-20);
}

TEST(MoeRouterMeasures, ATieDecidedTowardTheHigherIndexIsCounted) {
  OneToken t({0.9, 0.6, 0.6, 0.1});   // experts 1 and 2: the same logit and bias
  t.z[2] = t.z[1];
  EXPECT_EQ(t.measure({0, 1}, {0.9, 0.6}).ties, 0);
  const MoeRouterMeasures m = t.measure({0, 2}, {0.9, 0.6});
  EXPECT_EQ(m.ties, 1);
  EXPECT_EQ(m.flips_wide, 0);   // the margin is 0: a tie, not a wide flip
  t.b[2] = 1e-3f;               // another bias: not an input tie, and a wide margin (0.001)
  const MoeRouterMeasures other = moe_router_measure(t.p, t.z, t.b, {2, 0}, {0.6, 0.9}, {0, 1}, {0.9, 0.6}, kU, kTiny);
  EXPECT_EQ(other.ties, 0);
  EXPECT_EQ(other.flips_wide, 1);
}

TEST(MoeRouterMeasures, WeightsAreMatchedByExpertIdInAnySlotOrder) {
  const OneToken t({0.9, 0.6, 0.5, 0.1});
  const MoeRouterMeasures swapped = t.measure({1, 0}, {0.6, 0.9});
  EXPECT_EQ(swapped.agree, 1);
  EXPECT_EQ(swapped.weight_err, 0.0);
  const MoeRouterMeasures off = t.measure({1, 0}, {0.6 * (1 + 1e-3), 0.9});
  EXPECT_NEAR(off.weight_err, 1e-3, 1e-12);
  const MoeRouterMeasures nan = t.measure({0, 1}, {0.9, std::nan("")});
  EXPECT_EQ(nan.weight_err, INFINITY);
}

TEST(MoeRouterMeasures, IdsThatAreNotKDistinctExpertsAreInvalid) {
  const OneToken t({0.9, 0.6, 0.5, 0.1});
  EXPECT_EQ(t.measure({0, 0}, {0.9, 0.9}).invalid_ids, 1);
  EXPECT_EQ(t.measure({0, 4}, {0.9, 0.9}).invalid_ids, 1);
  EXPECT_EQ(t.measure({0, 1.5}, {0.9, 0.9}).invalid_ids, 1);
  const MoeRouterMeasures nan = t.measure({0, std::nan("")}, {0.9, 0.9});
  EXPECT_EQ(nan.invalid_ids, 1);
  EXPECT_EQ(nan.flips_wide, 1);
}

// Two groups of 2; topk_group 1, k 1. Group scores 0.9 + 0.1 = 1.0 and 0.8 + 0.2 + d: the group
// margin d decides whether choosing from the other group is a legitimate flip.
TEST(MoeRouterMeasures, AGroupFlipIsJudgedByTheGroupMargin) {
  const MoeRouterParams p = params(1, 4, 1, 2, 1);
  const std::vector<double> b(4, 0.0);
  for (double d : {0x1p-28, 1e-2}) {
    const std::vector<double> z = {logit(0.9), logit(0.1), logit(0.8), logit(0.2 - d)};
    const MoeRouterRank r = moe_router_rank(p, z.data(), b.data());
    EXPECT_NEAR(r.group_margin, d, 1e-12);
    EXPECT_EQ(r.experts, (std::vector<int64_t>{0, 1}));
    const MoeRouterMeasures m = moe_router_measure(p, z, b, {0}, {0.9}, {2}, {0.8}, kU, kTiny);
    EXPECT_EQ(m.flips, 1);
    EXPECT_EQ(m.flips_wide, d > 1e-3 ? 1 : 0) << d;
  }
}

}  // namespace
}  // namespace dg
