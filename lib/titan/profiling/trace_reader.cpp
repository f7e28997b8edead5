#include "titan/profiling/trace_reader.hpp"

#include <fstream>

#include "titan/util/error.hpp"

namespace titan::profiling {

nlohmann::json load_trace_json(const std::string& path) {
  std::ifstream in(path);
  TITAN_CHECK(in.good(), "trace: cannot open ", path);
  nlohmann::json trace;
  try {
    trace = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("trace: " + path + " is not valid JSON (" + e.what() + ")");
  }
  TITAN_CHECK(trace.is_object() && trace.contains("traceEvents"), "trace: ", path, " has no traceEvents");
  return trace;
}

std::vector<TraceEvent> read_trace_events(const std::string& path) {
  const nlohmann::json trace = load_trace_json(path);
  std::vector<TraceEvent> out;
  for (const auto& e : trace.at("traceEvents"))
    if (e.value("ph", "") == "X") out.push_back({e.value("name", ""), e.value("ts", 0.0), e.value("dur", 0.0)});
  return out;
}

const TraceEvent* find_event(const std::vector<TraceEvent>& events, const std::string& name) {
  for (const auto& e : events)
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace titan::profiling
