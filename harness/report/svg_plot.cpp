#include "harness/report/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "harness/report/report.h"

namespace dg {
namespace {

constexpr int kLeft = 72, kRight = 16, kTop = 34, kBottom = 46;

// One axis: data range and its mapping onto [p0, p1] pixels.
struct Axis {
  double lo = 1, hi = 10;
  bool log = true;
  double p0 = 0, p1 = 1;
  double t(double v) const {
    const double a = log ? std::log10(v) : v, b = log ? std::log10(lo) : lo, c = log ? std::log10(hi) : hi;
    return c == b ? 0.5 : (a - b) / (c - b);
  }
  double px(double v) const { return p0 + (p1 - p0) * t(v); }
};

bool drawable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

// Widens [lo, hi] a little (and a point to a range) so that no mark sits on the frame.
void pad(double& lo, double& hi, bool log) {
  if (log) {
    if (lo == hi) lo /= 2, hi *= 2;
    const double f = std::pow(hi / lo, 0.06);
    lo /= f, hi *= f;
  } else {
    if (lo == hi) {
      const double d = lo == 0 ? 1 : std::abs(lo) * 0.1;
      lo -= d, hi += d;
    }
    const double d = (hi - lo) * 0.06;
    lo -= d, hi += d;
  }
}

std::vector<double> linear_ticks(double lo, double hi) {
  const double raw = (hi - lo) / 5;
  if (!(raw > 0)) return {lo};
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

std::string frame_and_axes(const Axis& x, const Axis& y, const std::string& x_label, const std::string& y_label, int height,
                           bool y_ticks = true) {
  std::string s;
  const double left = x.p0, right = x.p1, top = y.p1, bottom = y.p0;
  for (double v : axis_ticks(x.lo, x.hi, x.log)) {
    const double px = x.px(v);
    s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" class=\"grid\"/>", px, top, bottom);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"middle\">{}</text>", px, bottom + 14,
                     xml_escape(tick_label(v)));
  }
  for (double v : y_ticks ? axis_ticks(y.lo, y.hi, y.log) : std::vector<double>{}) {
    const double py = y.px(v);
    s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" class=\"grid\"/>", left, py, right);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"end\">{}</text>", left - 4, py + 4,
                     xml_escape(tick_label(v)));
  }
  s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" class=\"frame\"/>", left, top,
                   right - left, bottom - top);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"label\" text-anchor=\"middle\">{}</text>", (left + right) / 2,
                   height - 8, xml_escape(x_label));
  if (!y_label.empty())
    s += fmt::format("<text x=\"14\" y=\"{0:.1f}\" class=\"label\" text-anchor=\"middle\" transform=\"rotate(-90 14 {0:.1f})\">{1}</text>",
                     (top + bottom) / 2, xml_escape(y_label));
  return s;
}

std::string open_svg(int width, int height, const std::string& title, const std::string& cls) {
  return fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"{}\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
                     "role=\"img\" aria-label=\"{}\"><title>{}</title><text x=\"{}\" y=\"18\" class=\"title\">{}</text>",
                     cls, width, height, width, height, xml_escape(title), xml_escape(title), kLeft, xml_escape(title));
}

}  // namespace

std::vector<double> axis_ticks(double lo, double hi, bool log) {
  if (!(hi > lo)) return {lo};
  if (!log || lo <= 0) return linear_ticks(lo, hi);
  const double decades = std::log10(hi / lo);
  std::vector<double> t;
  const int k0 = static_cast<int>(std::floor(std::log10(lo))), k1 = static_cast<int>(std::ceil(std::log10(hi)));
  for (int k = k0; k <= k1; ++k)
    for (double m : decades > 3 ? std::vector<double>{1} : std::vector<double>{1, 2, 5}) {
      const double v = m * std::pow(10.0, k);
      if (v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12)) t.push_back(v);
    }
  if (decades > 8) {   // every other power of ten
    std::vector<double> thin;
    for (size_t i = 0; i < t.size(); i += 2) thin.push_back(t[i]);
    t = thin;
  }
  return t.size() >= 2 ? t : linear_ticks(lo, hi);
}

std::string tick_label(double v) {
  if (v == 0) return "0";
  const double a = std::abs(v);
  if (a >= 1e-3 && a < 1e5) return fmt::format("{:.4g}", v);
  const int e = static_cast<int>(std::floor(std::log10(a)));
  const double m = v / std::pow(10.0, e);
  return std::abs(m - 1) < 1e-9 ? fmt::format("1e{}", e) : fmt::format("{:.3g}e{}", m, e);
}

std::string line_plot_svg(const LinePlot& p) {
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  for (const Series& s : p.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (drawable(s.x[i], p.log_x) && drawable(s.y[i], p.log_y)) {
        xlo = std::min(xlo, s.x[i]), xhi = std::max(xhi, s.x[i]);
        ylo = std::min(ylo, s.y[i]), yhi = std::max(yhi, s.y[i]);
      }
  std::string s = open_svg(p.width, p.height, p.title, "plot line");
  if (!(xlo <= xhi)) {
    s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"label\">no point to draw (every value is zero, negative or not "
                     "finite)</text></svg>",
                     kLeft, p.height / 2);
    return s;
  }
  pad(xlo, xhi, p.log_x);
  pad(ylo, yhi, p.log_y);
  // The legend takes a column on the right.
  const int legend_w = 300;
  const Axis x{xlo, xhi, p.log_x, static_cast<double>(kLeft), static_cast<double>(p.width - kRight - legend_w)};
  const Axis y{ylo, yhi, p.log_y, static_cast<double>(p.height - kBottom), static_cast<double>(kTop)};
  s += frame_and_axes(x, y, p.x_label, p.y_label, p.height);
  int row = 0;
  for (const Series& sr : p.series) {
    std::string pts, dots;
    for (size_t i = 0; i < sr.x.size() && i < sr.y.size(); ++i) {
      if (!drawable(sr.x[i], p.log_x) || !drawable(sr.y[i], p.log_y)) continue;
      pts += fmt::format("{:.1f},{:.1f} ", x.px(sr.x[i]), y.px(sr.y[i]));
      dots += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.2\" fill=\"{}\"/>", x.px(sr.x[i]), y.px(sr.y[i]),
                          xml_escape(sr.color));
    }
    s += fmt::format("<polyline class=\"series\" data-name=\"{}\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"{}/>",
                     xml_escape(sr.name), pts, xml_escape(sr.color), sr.dashed ? " stroke-dasharray=\"5 3\"" : "");
    s += dots;
    const double ly = kTop + 8 + 16.0 * row++;
    const double lx = p.width - kRight - legend_w + 10;
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"2\"{}/>", lx, ly,
                     lx + 18, ly, xml_escape(sr.color), sr.dashed ? " stroke-dasharray=\"5 3\"" : "");
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"legend\">{}</text>", lx + 22, ly + 4, xml_escape(sr.name));
  }
  return s + "</svg>";
}

std::string forest_plot_svg(const ForestPlot& p) {
  const int label_w = 330, row_h = 22;
  const int height = kTop + kBottom + row_h * static_cast<int>(std::max<size_t>(p.rows.size(), 1));
  double lo = 1, hi = 1;
  if (p.claim && *p.claim > 0) lo = std::min(lo, *p.claim), hi = std::max(hi, *p.claim);
  for (const ForestRow& r : p.rows)
    for (double v : {r.lo, r.hi, r.estimate})
      if (drawable(v, true)) lo = std::min(lo, v), hi = std::max(hi, v);
  pad(lo, hi, true);
  std::string s = open_svg(p.width, height, p.title, "plot forest");
  const Axis x{lo, hi, true, static_cast<double>(label_w), static_cast<double>(p.width - kRight)};
  const Axis y{0, 1, false, static_cast<double>(height - kBottom), static_cast<double>(kTop)};
  s += frame_and_axes(x, y, p.x_label, "", height, false);   // the rows' labels stand for y ticks
  s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" class=\"same\"/>", x.px(1.0), kTop, height - kBottom);
  if (p.claim && *p.claim > 0) {
    s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" class=\"claim\"/>", x.px(*p.claim), kTop,
                     height - kBottom);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"legend\" text-anchor=\"middle\">claim {}</text>", x.px(*p.claim),
                     kTop - 4, xml_escape(tick_label(*p.claim)));
  }
  for (size_t i = 0; i < p.rows.size(); ++i) {
    const ForestRow& r = p.rows[i];
    const double cy = kTop + row_h * (static_cast<double>(i) + 0.5);
    std::string label = r.label.size() > 52 ? r.label.substr(0, 51) + "\u2026" : r.label;
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"rowlabel\" text-anchor=\"end\"><title>{}</title>{}</text>", label_w - 6,
                     cy + 4, xml_escape(r.label), xml_escape(label));
    if (!drawable(r.estimate, true)) continue;
    if (drawable(r.lo, true) && drawable(r.hi, true))
      s += fmt::format("<line class=\"interval\" x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-width=\"2\"/>",
                       x.px(r.lo), cy, x.px(r.hi), xml_escape(r.color));
    s += fmt::format("<rect class=\"estimate\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"7\" height=\"7\" fill=\"{}\"><title>{:.3f} [{:.3f}, "
                     "{:.3f}]</title></rect>",
                     x.px(r.estimate) - 3.5, cy - 3.5, xml_escape(r.color), r.estimate, r.lo, r.hi);
  }
  return s + "</svg>";
}

}  // namespace dg
