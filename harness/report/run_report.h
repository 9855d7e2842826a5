// `driftgate report RUN.json... --out DIR`: one page for people from the JSON of verify, bench and
// gate runs, as report.html (self-contained: inline CSS and SVG, no script, nothing fetched) and
// report.md (the same tables, no plots).
//
// Sections, in order:
//   summary     per run: the verdict, what got faster and by how much with its interval (the
//               geometric mean over timed cases too), what lost precision (a patch 1 bit or more
//               below its base on an output), and what was not judged and why;
//   speed       a forest plot of the speedups with their intervals, the line of equal speed and the
//               gate's claim; a table with the verdict, the rank test's p and % of the machine's limit;
//   drift       per case: error (rms ratio) against context position on log-log axes, every
//               candidate of the case on one plot (a gate's base, patch and naive), with the growth
//               exponents in the legend;
//   precision   per case, candidate and output: bits, the change against the gate's base, ULP at
//               the output's rms, ULP p99 and max, NaN/Inf mismatches, disposition;
//   provenance  each run's commit, dirty flag, compiler, flags, CPU/GPU, the digests of binary,
//               policy and outside candidates, and every row's reproduce command.
// The records are read as the schemas in harness/schemas/ describe them; nothing is recomputed.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dg {

struct RunFile {
  std::string path;
  std::string kind;   // "gate", "verify", "bench"
  nlohmann::json j;
};

// Reads and classifies one file. Throws InputError naming the file and the problem: unreadable,
// not JSON, nested too deep, or not the JSON of a driftgate verify, bench or gate run.
RunFile read_run_file(const std::string& path);

struct RenderedReport {
  std::string html, markdown;
};
RenderedReport render_report(const std::vector<RunFile>& runs);

// Pieces shared with `driftgate compare` (harness/report/run_compare.h).
struct Table {
  std::vector<std::string> head;
  std::vector<std::vector<std::string>> rows;   // cells: plain text; `code` and **bold** are rendered
};
std::string table_md(const Table& t);
std::string table_html(const Table& t, const std::string& cls);
// A whole page: <!DOCTYPE html>, the report's CSS, a <h1> title, then `body`.
std::string html_page(const std::string& title, const std::string& body);
// A record's number: JSON numbers, and the strings "inf", "-inf" (NaN for "nan" and anything else).
double json_number(const nlohmann::json& j, const char* key);

}  // namespace dg
