#include "titan/profiling/timeline.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace titan::profiling {
namespace {

std::vector<std::string> rows_of(const std::vector<TimelineBar>& bars) {
  std::vector<std::string> rows;
  for (const auto& b : bars)
    if (std::find(rows.begin(), rows.end(), b.row) == rows.end()) rows.push_back(b.row);
  return rows;
}

std::pair<double, double> span(const std::vector<TimelineBar>& bars) {
  double t0 = bars.empty() ? 0 : bars.front().start_us, t1 = t0;
  for (const auto& b : bars) t0 = std::min(t0, b.start_us), t1 = std::max(t1, b.end_us);
  return {t0, std::max(t1, t0 + 1)};
}

char fill_of(const std::string& kind) {
  if (kind == "compute") return '#';
  if (kind == "comm") return '=';
  if (kind == "wait") return '!';
  if (kind == "forward" || kind == "backward" || kind == "backward_input" || kind == "backward_weight") return '#';
  return '-';
}

const char* colour_of(const std::string& kind) {
  if (kind == "compute") return "#4e79a7";
  if (kind == "comm") return "#f28e2b";
  if (kind == "wait") return "#e15759";
  // Pipeline schedules (parallel/pipeline/timeline.hpp).
  if (kind == "forward") return "#4e79a7";
  if (kind == "backward") return "#59a14f";
  if (kind == "backward_input") return "#76b7b2";
  if (kind == "backward_weight") return "#b07aa1";
  return "#9c9c9c";
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return o;
}

}  // namespace

std::string render_ascii(const std::vector<TimelineBar>& bars, int width) {
  const auto rows = rows_of(bars);
  const auto [t0, t1] = span(bars);
  size_t name_w = 0;
  for (const auto& r : rows) name_w = std::max(name_w, r.size());
  std::ostringstream os;
  for (const auto& r : rows) {
    std::string line(static_cast<size_t>(width), ' ');
    for (const auto& b : bars) {
      if (b.row != r) continue;
      int a = static_cast<int>((b.start_us - t0) / (t1 - t0) * width);
      int z = std::max(a + 1, static_cast<int>((b.end_us - t0) / (t1 - t0) * width));
      a = std::clamp(a, 0, width - 1), z = std::clamp(z, 1, width);
      for (int i = a; i < z; ++i) line[static_cast<size_t>(i)] = fill_of(b.kind);
      // The label goes on the bar when it fits.
      if (static_cast<int>(b.label.size()) + 2 <= z - a)
        for (size_t i = 0; i < b.label.size(); ++i) line[static_cast<size_t>(a + 1) + i] = b.label[i];
    }
    os << r << std::string(name_w - r.size(), ' ') << " |" << line << "|\n";
  }
  char scale[128];
  std::snprintf(scale, sizeof scale, "%s  0 us%*s%.0f us\n", std::string(name_w, ' ').c_str(), width - 6,
                "", t1 - t0);
  os << scale << std::string(name_w + 2, ' ') << "# compute  = communication in flight  ! waiting on communication\n";
  return os.str();
}

std::string render_svg(const std::vector<TimelineBar>& bars, const std::string& title) {
  const auto rows = rows_of(bars);
  const auto [t0, t1] = span(bars);
  const double left = 160, width = 1000, row_h = 28, top = 40;
  const double height = top + row_h * static_cast<double>(rows.size()) + 40;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < rows.size(); ++i) index[rows[i]] = i;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + width + 20 << "\" height=\"" << height
     << "\" font-family=\"monospace\" font-size=\"11\">\n";
  os << "<text x=\"10\" y=\"20\" font-size=\"14\">" << escape(title) << "</text>\n";
  for (size_t i = 0; i < rows.size(); ++i)
    os << "<text x=\"10\" y=\"" << top + row_h * static_cast<double>(i) + 17 << "\">" << escape(rows[i]) << "</text>\n";
  for (const auto& b : bars) {
    const double x = left + (b.start_us - t0) / (t1 - t0) * width;
    const double w = std::max(1.0, (b.end_us - b.start_us) / (t1 - t0) * width);
    const double y = top + row_h * static_cast<double>(index[b.row]) + 3;
    os << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << row_h - 6 << "\" fill=\""
       << colour_of(b.kind) << "\" stroke=\"white\" stroke-width=\"0.5\"><title>" << escape(b.label) << ": "
       << b.start_us - t0 << " - " << b.end_us - t0 << " us</title></rect>\n";
    if (w > 7.0 * static_cast<double>(b.label.size()))
      os << "<text x=\"" << x + 2 << "\" y=\"" << y + 15 << "\" fill=\"white\">" << escape(b.label) << "</text>\n";
  }
  os << "<text x=\"" << left << "\" y=\"" << height - 12 << "\">0 us</text><text x=\"" << left + width - 60
     << "\" y=\"" << height - 12 << "\">" << static_cast<long long>(t1 - t0) << " us</text>\n</svg>\n";
  return os.str();
}

}  // namespace titan::profiling
