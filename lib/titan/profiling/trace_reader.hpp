#pragma once
/// @file
/// @brief Reading a Chrome / Perfetto JSON trace back (what TraceProfiler
/// writes): its complete events, for chapter tables and tests.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace titan::profiling {

/// @brief One complete event ("ph": "X") of a trace: a range or an op.
struct TraceEvent {
  std::string name;
  double ts = 0;   ///< start, µs
  double dur = 0;  ///< duration, µs
  /// Whether `inner` lies within this event's interval.
  bool contains(const TraceEvent& inner) const { return inner.ts >= ts && inner.ts + inner.dur <= ts + dur; }
};

/// @brief The trace at `path` parsed, checked to hold "traceEvents".
/// Throws titan::Error naming the file when it is missing or not a trace.
nlohmann::json load_trace_json(const std::string& path);

/// @brief The complete events of the trace at `path`, in file order.
/// Throws titan::Error naming the file when it is missing or not a trace.
std::vector<TraceEvent> read_trace_events(const std::string& path);

/// @brief The first event called `name`, or null.
const TraceEvent* find_event(const std::vector<TraceEvent>& events, const std::string& name);

}  // namespace titan::profiling
