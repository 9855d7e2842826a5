// kpool_indexer's measures (harness/ops/kpool_indexer.h) on hand-made candidate outputs: pools judged
// as whole sets in any slot order, a wide pool miss counted, a tie of identical pools decided against
// the rule counted, and every kind of invalid id (a token before the first valid one, a partial
// pool, a missing tail token, the sentinel written 0).
#include "harness/ops/kpool_indexer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dg {
namespace {

// H = 1, D = 1, q = w = 1, 12 tokens. Row [1, 11): pools {1..4} (keys 1, score 1) and {5..8} (gate 50
// on token 6, key 3: score ~3), tail {9, 10}; topk = 1 pool, 7 slots.
struct OneRow {
  KpoolIndexerParams p;
  KpoolInputs in;
  std::vector<double> ref = {5, 6, 7, 8, 9, 10, -1};
  OneRow() {
    p.B = 1, p.L = 12, p.H = 1, p.D = 1, p.topk = 1;
    in.q = {1}, in.w = {1}, in.ape = {0, 0, 0, 0};
    in.k = {0, 1, 1, 1, 1, -20, 3, 0, 0, 0, 0, 0};
    in.gate = std::vector<double>(12, 0.0);
    in.gate[6] = 50;
    in.ctx = {11}, in.start = {1};
  }
  double value(const std::vector<double>& ids, const char* name) const {
    for (const OpMeasure& m : kpool_indexer_measure(p, in, ref, ids, 0x1p-24))
      if (m.name == name) return m.value;
    return std::nan("");
  }
};

TEST(KpoolIndexerMeasures, PoolsAreJudgedAsSetsAndInvalidIdsCounted) {
  const OneRow r;
  EXPECT_EQ(r.value({10, 9, 8, 7, 6, 5, -1}, "invalid_ids"), 0);   // any slot order
  EXPECT_EQ(r.value({10, 9, 8, 7, 6, 5, -1}, "misses"), 0);
  EXPECT_EQ(r.value({1, 2, 3, 4, 9, 10, -1}, "misses_wide"), 2);   // pool {1..4} (1) for {5..8} (3)
  EXPECT_EQ(r.value({1, 2, 3, 4, 9, 10, -1}, "invalid_ids"), 0);
  EXPECT_EQ(r.value({0, 6, 7, 8, 9, 10, -1}, "invalid_ids"), 1);   // token 0 is before the first valid one
  EXPECT_EQ(r.value({5, 6, 7, 1, 9, 10, -1}, "invalid_ids"), 1);   // two partial pools
  EXPECT_EQ(r.value({5, 6, 7, 8, 9, -1, -1}, "invalid_ids"), 1);   // tail token 10 missing
  EXPECT_EQ(r.value({5, 6, 7, 8, 9, 10, 0}, "invalid_ids"), 1);    // the sentinel written 0
  EXPECT_EQ(r.value({5, 6, 7, 8, 9, 10, 11}, "invalid_ids"), 1);   // a future token
}

TEST(KpoolIndexerMeasures, IdenticalPoolsAreDecidedByTheLowerPool) {
  OneRow r;
  r.in.k = {0, 0, 0, 0, 2, 3, 4, 5, 2, 3, 4, 5};
  r.in.gate = std::vector<double>(12, 0.0);
  r.in.ctx = {12}, r.in.start = {0};
  r.ref = {4, 5, 6, 7, -1, -1, -1};
  EXPECT_EQ(r.value({4, 5, 6, 7, -1, -1, -1}, "tie_breaks"), 0);
  EXPECT_EQ(r.value({8, 9, 10, 11, -1, -1, -1}, "tie_breaks"), 1);
  EXPECT_EQ(r.value({8, 9, 10, 11, -1, -1, -1}, "misses_wide"), 0);   // a tie straddling rank topk: undecided
}

}  // namespace
}  // namespace dg
