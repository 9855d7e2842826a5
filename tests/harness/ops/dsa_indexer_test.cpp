// The top-k set judgment (harness/ops/topk_set.h) and dsa_indexer's measures (harness/ops/dsa_indexer.h)
// on hand-made candidate outputs: a miss inside the score bounds allowed, one outside counted on
// either side of rank k, a tie decided against the rule counted, invalid ids of every kind.
#include "harness/ops/dsa_indexer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "harness/ops/topk_set.h"

namespace dg {
namespace {

// Scores 10, 9, 8, 7.999, 3 with bounds 0.01: k = 3 selects {0, 1, 2}; 3 sits inside the bounds of 2.
const std::vector<double> kS = {10, 9, 8, 7.999, 3}, kT = {0.01, 0.01, 0.01, 0.01, 0.01};

TEST(TopkSet, AMissInsideTheBoundsIsAllowedAndOneOutsideIsWide) {
  const TopkSetRow near = judge_topk_row(kS, kT, {0, 1, 2}, {0, 1, 3}, {});
  EXPECT_EQ(near.misses, 2);   // 2 left out, 3 taken in
  EXPECT_EQ(near.misses_wide, 0);
  EXPECT_DOUBLE_EQ(near.recall(), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(near.jaccard(), 2.0 / 4.0);
  const TopkSetRow far = judge_topk_row(kS, kT, {0, 1, 2}, {0, 1, 4}, {});
  EXPECT_EQ(far.misses_wide, 1);   // 4 (3) taken in is far below; 2 (8) left out is within the bounds of 3 (7.999)
  const TopkSetRow high = judge_topk_row(kS, kT, {0, 1, 2}, {1, 2, 3}, {});
  EXPECT_EQ(high.misses_wide, 1);   // key 0 (10) left out: only 3 (7.999) was its rival, wide; 3 taken in is not
}

TEST(TopkSet, TiesAreDecidedByTheLowerIndex) {
  const std::vector<double> s = {5, 4, 4, 1}, t = {1e-6, 1e-6, 1e-6, 1e-6};
  const std::vector<int64_t> cls = {-1, 1, 1, -1};   // keys 1 and 2 identical
  const TopkSetRow rule = judge_topk_row(s, t, {0, 1}, {0, 1}, cls);
  EXPECT_FALSE(rule.tie_break);
  const TopkSetRow against = judge_topk_row(s, t, {0, 1}, {0, 2}, cls);
  EXPECT_TRUE(against.tie_break);
  EXPECT_EQ(against.misses_wide, 0);   // a tie straddling rank k is undecided by the scores
  EXPECT_EQ(identical_rows({1, 2, 3, 4, 1, 2, 1, 2}, 4, 2), (std::vector<int64_t>{0, -1, 0, 0}));
}

// One row, H = 1, D = 1, q = 1, w = 1 (scale 1): scores are the keys' ReLU. topk = 2 over ctx = 4 of L = 5.
struct OneRow {
  DsaIndexerParams p{1, 5, 1, 1, 2};
  std::vector<double> q = {1}, k = {4, 3, 1, 2, 9}, w = {1}, ref = {0, 1};
  double value(const std::vector<double>& ids, const std::vector<double>& sc, const char* name, std::vector<int64_t> ctx = {4}) const {
    for (const OpMeasure& m : dsa_indexer_measure(p, ctx, q, k, w, ref, ids, sc, 0x1p-24))
      if (m.name == name) return m.value;
    return std::nan("");
  }
};

TEST(DsaIndexerMeasures, InvalidIdsOfEveryKindAreCounted) {
  const OneRow r;
  EXPECT_EQ(r.value({1, 0}, {3, 4}, "invalid_ids"), 0);   // any slot order
  EXPECT_EQ(r.value({0, 4}, {4, 9}, "invalid_ids"), 1);   // key 4 is in the future
  EXPECT_EQ(r.value({0, 5}, {4, 0}, "invalid_ids"), 1);   // out of range
  EXPECT_EQ(r.value({0, 0}, {4, 4}, "invalid_ids"), 1);   // duplicate
  EXPECT_EQ(r.value({0, -1}, {4, 0}, "invalid_ids"), 1);  // a sentinel where a key belongs
  EXPECT_EQ(r.value({0, -1}, {4, 0}, "invalid_ids", {1}), 0);   // ctx 1: one key and one -1
  EXPECT_EQ(r.value({0, 0}, {4, 0}, "invalid_ids", {1}), 1);    // the sentinel written 0
  EXPECT_EQ(r.value({0, 3}, {4, 2}, "misses_wide"), 2);   // key 3 (2) for key 1 (3): a gap of 1 >> 2^-24
  EXPECT_NEAR(r.value({0, 1}, {4, 3.0001}, "score_err"), 1e-4 / 3, 1e-12);
  EXPECT_EQ(r.value({0, 1}, {4, 3}, "recall"), 1.0);
}

}  // namespace
}  // namespace dg
