#pragma once
// The chapter's figure: line charts of measured series against the
// sequence length, log-log, as a self-contained SVG.
#include <string>
#include <vector>

namespace ch06 {

/// One measured line: a value per x (NaN = not measured there).
struct Series {
  std::string name;
  std::string color;
  std::vector<double> values;
};

/// One panel: its title, the y axis unit, the lines.
struct Panel {
  std::string title;
  std::string y_unit;
  std::vector<Series> series;
};

/// Panels side by side over the same x values (powers of two, log scale),
/// y on a log scale per panel.
std::string line_charts_svg(const std::string& title, const std::vector<double>& x, const std::vector<Panel>& panels);

}  // namespace ch06
