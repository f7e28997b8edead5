#pragma once
/// @file
/// @brief Step timelines: intervals of compute and communication per row
/// (a rank, or a rank's compute and comm streams), drawn as
/// ASCII charts in a terminal and as an SVG file a browser opens.

#include <string>
#include <vector>

namespace titan::profiling {

/// @brief One interval on a timeline.
struct TimelineBar {
  std::string row;    ///< e.g. "rank 0 compute", "rank 0 comm"
  std::string label;  ///< short text drawn on the bar ("mm 2", "ag")
  double start_us = 0, end_us = 0;
  /// Picks the colour / ASCII fill: "compute", "comm", "wait", the pipeline
  /// actions "forward", "backward", "backward_input", "backward_weight"
  /// (own colours, drawn as compute), anything else.
  std::string kind;
};

/// @brief Rows in first-appearance order, time left to right over `width`
/// characters: compute as '#', comm as '=', wait as '!', others '-'; a
/// scale line underneath. Times are shifted so the first bar starts at 0.
std::string render_ascii(const std::vector<TimelineBar>& bars, int width = 100);

/// @brief The same chart as a standalone SVG document (bars with their
/// labels and a tooltip of the exact interval in microseconds).
std::string render_svg(const std::vector<TimelineBar>& bars, const std::string& title);

}  // namespace titan::profiling
