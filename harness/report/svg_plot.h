// Two kinds of plot for `driftgate report`, as inline SVG text: lines over log or linear axes (the
// drift curves: error against context position), and a forest plot (one row per case: a point with
// its interval, reference lines at 1 and at a claim).
//
// A small writer of our own, not a plotting library: Debian 12 packages no C++ library that writes
// SVG (matplot++ and sciplot are not packaged; gnuplot is a separate program whose SVG output
// differs between versions and would add a run-time dependency to a verb that must work on any
// machine that built driftgate). The report needs only these two plots, axes with readable ticks
// (1, 2, 5 x 10^k on log axes), labels, units and a legend; tests/harness/report/svg_plot_test.cpp checks
// the mapping from data to pixels and the escaping of text.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dg {

// (xml_escape, which every text here goes through, is in harness/report/report.h.)

struct Series {
  std::string name;
  std::string color;                      // a CSS colour
  std::vector<double> x, y;               // points with x, y > 0 on log axes (others are dropped)
  bool dashed = false;
};

struct LinePlot {
  std::string title, x_label, y_label;   // labels carry their units
  bool log_x = true, log_y = true;
  int width = 960, height = 300;
  std::vector<Series> series;
};

// The SVG element; a plot without a drawable point is a box that says so.
std::string line_plot_svg(const LinePlot& p);

struct ForestRow {
  std::string label;
  double estimate = 0, lo = 0, hi = 0;    // > 0 (log axis)
  std::string color;
};

struct ForestPlot {
  std::string title, x_label;
  std::vector<ForestRow> rows;
  std::optional<double> claim;            // a dashed line and its label
  int width = 960;
};

// Log x axis around every interval and 1 (the "same speed" line).
std::string forest_plot_svg(const ForestPlot& p);

// Axis ticks: on a log axis over [lo, hi] the values 1, 2, 5 x 10^k inside it (only the powers of
// ten when that gives 2 or more); on a linear axis about 5 round values. Exposed for the tests.
std::vector<double> axis_ticks(double lo, double hi, bool log);
std::string tick_label(double v);

}  // namespace dg
