// Top-k set judgment of one row (topk_set.h).
#include "harness/ops/topk_set.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string_view>
#include <utility>

namespace dg {

void TopkSetTotals::add(const TopkSetRow& r) {
  ++rows;
  misses += r.misses;
  misses_wide += r.misses_wide;
  tie_rows += r.tie_break ? 1 : 0;
  recall += r.recall();
  jaccard += r.jaccard();
  widest = std::max(widest, r.widest);
}

std::vector<OpMeasure> topk_set_measures(const TopkSetTotals& t, int64_t invalid_rows, const TopkSetDetails& detail,
                                         std::vector<OpMeasure> extra) {
  const double rows = static_cast<double>(t.rows), nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<OpMeasure> m = {
      {"misses_wide", static_cast<double>(t.misses_wide), 0.0, false, 0.0, detail.misses_wide},
      {"tie_breaks", static_cast<double>(t.tie_rows), 0.0, false, 0.0, detail.tie_breaks},
      {"invalid_ids", static_cast<double>(invalid_rows), 0.0, false, 0.0, detail.invalid_ids},
  };
  for (OpMeasure& e : extra) m.push_back(std::move(e));
  m.push_back({"recall", t.recall / rows, nan, false, 0.0, detail.recall});
  m.push_back({"jaccard", t.jaccard / rows, nan, false, 0.0, detail.jaccard});
  m.push_back({"misses", static_cast<double>(t.misses), nan, false, 0.0, detail.misses});
  return m;
}

TopkSetRow judge_topk_row(const std::vector<double>& score, const std::vector<double>& tol, const std::vector<int64_t>& ref,
                          const std::vector<int64_t>& cand, const std::vector<int64_t>& tie_class) {
  const int64_t n = static_cast<int64_t>(score.size());
  TopkSetRow r;
  r.ref_size = static_cast<int64_t>(ref.size());
  r.cand_size = static_cast<int64_t>(cand.size());
  std::vector<char> in_ref(static_cast<size_t>(n), 0), in_cand(static_cast<size_t>(n), 0);
  for (int64_t i : ref) in_ref[static_cast<size_t>(i)] = 1;
  for (int64_t i : cand) in_cand[static_cast<size_t>(i)] = 1;
  const double inf = std::numeric_limits<double>::infinity();
  double lo = inf, hi = -inf;
  for (int64_t i = 0; i < n; ++i) {
    const size_t u = static_cast<size_t>(i);
    if (in_ref[u]) lo = std::min(lo, score[u] - tol[u]);
    else hi = std::max(hi, score[u] + tol[u]);
  }
  for (int64_t i = 0; i < n; ++i) {
    const size_t u = static_cast<size_t>(i);
    const bool a = in_ref[u] != 0, c = in_cand[u] != 0;
    if (a && c) ++r.common;
    if (a == c) continue;
    ++r.misses;
    const double past = c ? lo - (score[u] + tol[u]) : (score[u] - tol[u]) - hi;
    if (past > 0) ++r.misses_wide;
    r.widest = std::max(r.widest, past / std::max(tol[u], std::numeric_limits<double>::min()));
  }
  if (!tie_class.empty())
    for (int64_t i : cand) {
      const int64_t first = tie_class[static_cast<size_t>(i)];
      if (first < 0) continue;
      for (int64_t j = first; j < i && !r.tie_break; ++j)
        r.tie_break = tie_class[static_cast<size_t>(j)] == first && !in_cand[static_cast<size_t>(j)];
    }
  return r;
}

std::vector<int64_t> identical_rows(const std::vector<double>& rows, int64_t n, int64_t width) {
  std::vector<int64_t> cls(static_cast<size_t>(n), -1);
  std::map<std::string_view, int64_t> first;
  const char* base = reinterpret_cast<const char*>(rows.data());
  const size_t bytes = static_cast<size_t>(width) * sizeof(double);
  for (int64_t i = 0; i < n; ++i) {
    const auto [it, fresh] = first.emplace(std::string_view(base + static_cast<size_t>(i) * bytes, bytes), i);
    if (!fresh) cls[static_cast<size_t>(i)] = cls[static_cast<size_t>(it->second)] = it->second;
  }
  return cls;
}

}  // namespace dg
