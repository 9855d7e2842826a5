// `driftgate compare A.json B.json`: two runs of the same kind (two releases, two machines, before
// and after a patch), row by row: precision in bits and its change, speed with an interval, and a
// verdict per row. Markdown on stdout; --json FILE; --out DIR adds compare.md, compare.json and
// report.html (the report's style, one table and one forest plot).
//
// Rows are matched by case (gate) or by case and candidate (verify, bench); a row in one run only
// is listed as such, never compared. Per row:
//   bits     for every output both rows have: B's bits - A's (gate: the patch's). A change of a bit
//            or more either way is LOST or GAINED precision; a disposition or gate verdict that
//            changed (PASSED to INCORRECT, MERGE to REJECT) is BROKE or FIXED.
//   speed    bench: time(A) / time(B) from both runs' raw samples (the bootstrap interval of the
//            ratio of medians, 95%), > 1 when B is faster. gate: B's speedup over its base divided
//            by A's, the interval from both rows' intervals (independent, normal in log space: the
//            standard errors add in quadrature). Verdict FASTER / SAME / SLOWER / AMBIGUOUS with
//            the default policy's min_effect. Two runs measured at different times or on different
//            machines carry that difference too: the interval covers the noise within each run
//            only.
// Exit code: 0 when no row lost precision or broke; 1 when one did; 2 for bad input (unreadable
// files, runs of different kinds, nothing in common). Speed verdicts between runs are information,
// not a gate (see above); `gate` decides speed from interleaved samples of one run.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "harness/report/run_report.h"

namespace dg {

struct Comparison {
  nlohmann::json json;     // {"kind", "a", "b", "rows": [...], "only_in_a": [...], "only_in_b": [...], "regressions"}
                           // (regressions: rows that lost precision or broke)
  std::string markdown;
  std::string html;
  int regressions = 0;
};

// Throws InputError for runs of different kinds or with no row in common.
Comparison compare_runs(const RunFile& a, const RunFile& b);

}  // namespace dg
