// The report's SVG writer: escaping, ticks people can read, data mapped onto the plot's frame.
#include "harness/report/svg_plot.h"

#include "harness/report/report.h"

#include <regex>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(SvgPlot, EscapesText) {
  EXPECT_EQ(xml_escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  LinePlot p;
  p.title = "<script>";
  p.series.push_back({"x</text>", "red", {1, 10}, {1, 2}});
  const std::string s = line_plot_svg(p);
  EXPECT_THAT(s, ::testing::Not(HasSubstr("<script>")));
  EXPECT_THAT(s, HasSubstr("x&lt;/text&gt;"));
}

TEST(SvgPlot, TicksAreRoundNumbers) {
  EXPECT_THAT(axis_ticks(1e-7, 1e-6, true), ElementsAre(1e-7, 2e-7, 5e-7, 1e-6));
  // Many decades: powers of ten only.
  EXPECT_THAT(axis_ticks(0.5, 2e4, true), ElementsAre(1, 10, 100, 1000, 1e4));
  // A narrow log range gets round linear ticks.
  const std::vector<double> t = axis_ticks(0.91, 0.99, true);
  ASSERT_GE(t.size(), 3u);
  for (double v : t) EXPECT_NEAR(v * 50, std::round(v * 50), 1e-9) << v;   // multiples of 0.02
  EXPECT_THAT(axis_ticks(0, 10, false), ElementsAre(0, 2, 4, 6, 8, 10));
  EXPECT_EQ(tick_label(1e-7), "1e-7");
  EXPECT_EQ(tick_label(2e-7), "2e-7");
  EXPECT_EQ(tick_label(1000), "1000");
  EXPECT_EQ(tick_label(0.25), "0.25");
}

// Points are inside the frame, in order: larger x to the right, larger y higher up (smaller pixel y).
TEST(SvgPlot, PointsMapInsideTheFrameInOrder) {
  LinePlot p;
  p.series.push_back({"s", "blue", {1, 10, 100}, {1e-7, 1e-6, 1e-5}});
  const std::string s = line_plot_svg(p);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(s, m, std::regex("points=\"([^\"]*)\"")));
  std::istringstream in(m[1].str());
  std::vector<std::pair<double, double>> pts;
  for (std::string xy; in >> xy;) pts.push_back({std::stod(xy.substr(0, xy.find(','))), std::stod(xy.substr(xy.find(',') + 1))});
  ASSERT_EQ(pts.size(), 3u);
  ASSERT_TRUE(std::regex_search(s, m, std::regex("<rect x=\"([0-9.]+)\" y=\"([0-9.]+)\" width=\"([0-9.]+)\" height=\"([0-9.]+)\" class=\"frame\"")));
  const double x0 = std::stod(m[1]), y0 = std::stod(m[2]), w = std::stod(m[3]), h = std::stod(m[4]);
  for (const auto& [x, y] : pts) {
    EXPECT_GT(x, x0);
    EXPECT_LT(x, x0 + w);
    EXPECT_GT(y, y0);
    EXPECT_LT(y, y0 + h);
  }
  EXPECT_LT(pts[0].first, pts[1].first);
  EXPECT_GT(pts[0].second, pts[1].second);
  // Equal steps in log space are equal steps in pixels.
  EXPECT_NEAR(pts[1].first - pts[0].first, pts[2].first - pts[1].first, 0.2);
  EXPECT_NEAR(pts[0].second - pts[1].second, pts[1].second - pts[2].second, 0.2);
}

TEST(SvgPlot, NothingToDrawSaysSo) {
  LinePlot p;
  p.series.push_back({"zeros", "blue", {1, 2}, {0, 0}});   // log y: nothing drawable
  EXPECT_THAT(line_plot_svg(p), HasSubstr("no point to draw"));
}

TEST(SvgPlot, ForestRowsCarryTheirIntervalsAndTheClaim) {
  ForestPlot f;
  f.title = "speedups";
  f.claim = 1.5;
  f.rows.push_back({"case one", 1.2, 1.1, 1.3, "green"});
  f.rows.push_back({"case two", 0.8, 0.7, 0.9, "red"});
  const std::string s = forest_plot_svg(f);
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 0);
  size_t n = 0;
  for (size_t at = 0; (at = s.find("class=\"interval\"", at)) != std::string::npos; ++at) ++n;
  EXPECT_EQ(n, 2u);
  EXPECT_THAT(s, HasSubstr("claim 1.5"));
  EXPECT_THAT(s, HasSubstr("<title>1.200 [1.100, 1.300]</title>"));
  EXPECT_THAT(s, HasSubstr("class=\"same\""));
}

}  // namespace
}  // namespace dg
