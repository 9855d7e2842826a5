// The judgment of one row's top-k selection against the reference's, shared by the indexers
// (dsa_indexer: keys; kpool_indexer: pools). moe_router judges a token's whole set by its one
// margin; an indexer's row selects thousands of items, so here each item in the symmetric difference
// is judged on its own against the reference's scores at rank k:
//
//   s_i, t_i     the reference's score of item i (double) and a bound on |candidate score - s_i|
//                from the candidate's formats (the caller's)
//   lo = min over the reference's set R of s_j - t_j,   hi = max over the items outside R of s_j + t_j
//   an item the candidate selected and the reference did not is a wide miss when s_i + t_i < lo;
//   an item the reference selected and the candidate did not, when s_i - t_i > hi. An honest
//   candidate (every score within its t) never misses wide: the k items of R score >= lo in its
//   arithmetic, so its k-th largest score is >= lo and everything it selects has s_i + t_i >= lo;
//   only the k items of R can score above hi, so everything it leaves out has s_i - t_i <= hi.
//   A tie straddling rank k (equal s and t on both sides) is undecided: missing either side is not wide.
//
//   tie_breaks   the tie rule (the lower index first) decides exact ties that the inputs make: items
//                of one tie class (bitwise-identical inputs, so equal scores in every arithmetic)
//                must be selected lowest index first; a selected item with an unselected lower-index
//                member of its class breaks the rule
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "harness/cases/registry.h"

namespace dg {

struct TopkSetRow {
  int64_t misses = 0, misses_wide = 0;   // items in the symmetric difference, and the wide ones
  int64_t common = 0, ref_size = 0, cand_size = 0;
  bool tie_break = false;                // the candidate broke the tie rule
  double widest = 0;                     // the largest (s_i - hi) / t_i or (lo - s_i) / t_i of a miss (0: none)
  double recall() const { return ref_size == 0 ? 1.0 : static_cast<double>(common) / static_cast<double>(ref_size); }
  double jaccard() const {
    const int64_t u = ref_size + cand_size - common;
    return u == 0 ? 1.0 : static_cast<double>(common) / static_cast<double>(u);
  }
};

// The rows of a case summed: add(row) once per row.
struct TopkSetTotals {
  int64_t rows = 0, misses = 0, misses_wide = 0, tie_rows = 0;
  double recall = 0, jaccard = 0, widest = 0;  // recall and jaccard summed over the rows
  void add(const TopkSetRow& r);
};

// The op-specific detail lines of the shared measures (what an item is: a key, a pool).
struct TopkSetDetails {
  std::string misses_wide, tie_breaks, invalid_ids, recall, jaccard, misses;
};

// The indexers' common measures: misses_wide, tie_breaks and invalid_ids (limit 0), then `extra`
// (the op's own measures), then recall and jaccard (means over the rows) and misses (no rule).
// invalid_rows: the rows whose ids broke the op's output format.
std::vector<OpMeasure> topk_set_measures(const TopkSetTotals& t, int64_t invalid_rows, const TopkSetDetails& detail,
                                         std::vector<OpMeasure> extra = {});

// score and tol [n] the reference's scores of the row's n items and their bounds; ref and cand the
// selected items (distinct, in [0, n)); tie_class [n] (empty: no exact ties) the lowest index of
// each item's tie class, -1 for an item alone.
TopkSetRow judge_topk_row(const std::vector<double>& score, const std::vector<double>& tol, const std::vector<int64_t>& ref,
                          const std::vector<int64_t>& cand, const std::vector<int64_t>& tie_class);

// The tie classes of n rows of `width` doubles each (`rows` row-major): for each row the lowest index
// of a bitwise-equal row, or -1 when no other row equals it.
std::vector<int64_t> identical_rows(const std::vector<double>& rows, int64_t n, int64_t width);

// The last value computed from a key, recomputed when the key changes: the measures of a case need
// the reference's scores of every item in double, which cost as much as a candidate, and verify
// runs the base, the naive and every variant on the same inputs one after another. Thread-safe.
template <class Key, class Value> class LastResult {
 public:
  std::shared_ptr<const Value> get(const Key& key, const std::function<Value()>& compute) {
    const std::lock_guard<std::mutex> lock(mu_);
    if (!key_ || !(*key_ == key)) {
      value_ = std::make_shared<const Value>(compute());
      key_ = key;
    }
    return value_;
  }

 private:
  std::mutex mu_;
  std::optional<Key> key_;
  std::shared_ptr<const Value> value_;
};

}  // namespace dg
