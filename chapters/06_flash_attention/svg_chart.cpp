// A small log-log line chart writer for chapter 06's figure (memory and
// time against sequence length). Only what the figure needs: axes with
// decade ticks, one polyline and dot per series, a legend.
#include "svg_chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace ch06 {
namespace {

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

std::string label(double v) {
  if (v >= 1024 && std::fmod(v, 1024) == 0) return fmt("%.0fK", v / 1024);
  return v >= 1 ? fmt("%g", v) : fmt("%.2g", v);
}

}  // namespace

std::string line_charts_svg(const std::string& title, const std::vector<double>& x, const std::vector<Panel>& panels) {
  const double pw = 420, ph = 300, left = 70, top = 50, gap = 90;
  const double width = left + panels.size() * (pw + gap), height = top + ph + 90;
  std::string s = fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                      "font-family=\"sans-serif\" font-size=\"12\">\n",
                      width, height);
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += fmt("<text x=\"%.0f\" y=\"22\" font-size=\"15\">", left) + title + "</text>\n";
  const double lx0 = std::log2(x.front()), lx1 = std::log2(x.back());
  for (size_t p = 0; p < panels.size(); ++p) {
    const Panel& panel = panels[p];
    const double x0 = left + p * (pw + gap);
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const Series& se : panel.series)
      for (double v : se.values)
        if (std::isfinite(v) && v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
    const double ly0 = std::floor(std::log10(lo)), ly1 = std::max(ly0 + 1, std::ceil(std::log10(hi)));
    auto px = [&](double xv) { return x0 + (std::log2(xv) - lx0) / std::max(1e-9, lx1 - lx0) * pw; };
    auto py = [&](double yv) { return top + ph - (std::log10(yv) - ly0) / (ly1 - ly0) * ph; };
    s += fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n", x0, top,
             pw, ph);
    s += fmt("<text x=\"%.1f\" y=\"%.1f\">", x0, top - 10) + panel.title + "</text>\n";
    for (double e = ly0; e <= ly1; ++e) {
      const double y = py(std::pow(10, e));
      s += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x0, y, x0 + pw, y);
      s += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", x0 - 6, y + 4) + label(std::pow(10, e)) + " " +
           panel.y_unit + "</text>\n";
    }
    for (double xv : x)
      s += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", px(xv), top + ph + 18) + label(xv) + "</text>\n";
    s += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">sequence length</text>\n", x0 + pw / 2, top + ph + 36);
    for (size_t k = 0; k < panel.series.size(); ++k) {
      const Series& se = panel.series[k];
      std::string pts;
      for (size_t i = 0; i < x.size() && i < se.values.size(); ++i) {
        if (!std::isfinite(se.values[i]) || se.values[i] <= 0) continue;
        pts += fmt("%.1f,%.1f ", px(x[i]), py(se.values[i]));
        s += fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"", px(x[i]), py(se.values[i])) + se.color + "\"/>\n";
      }
      s += "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" + se.color + "\" points=\"" + pts + "\"/>\n";
      const double ly = top + ph + 54 + 0 * k;
      const double lxk = x0 + k * (pw / std::max<size_t>(1, panel.series.size()));
      s += fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"4\" fill=\"", lxk, ly - 4) + se.color + "\"/>\n";
      s += fmt("<text x=\"%.1f\" y=\"%.1f\">", lxk + 18, ly) + se.name + "</text>\n";
    }
  }
  s += "</svg>\n";
  return s;
}

}  // namespace ch06
