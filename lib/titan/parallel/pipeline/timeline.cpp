#include "titan/parallel/pipeline/timeline.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace titan::pp {
namespace {

const char* code_of(ActionType t) {
  switch (t) {
    case ActionType::Forward: return "F";
    case ActionType::Backward: return "B";
    case ActionType::BackwardInput: return "I";
    case ActionType::BackwardWeight: return "W";
    case ActionType::SendForward: return "SEND_F";
    case ActionType::RecvForward: return "RECV_F";
    case ActionType::SendBackward: return "SEND_B";
    case ActionType::RecvBackward: return "RECV_B";
  }
  return "?";
}

const char* kind_of(ActionType t) {
  switch (t) {
    case ActionType::Forward: return "forward";
    case ActionType::Backward: return "backward";
    case ActionType::BackwardInput: return "backward_input";
    case ActionType::BackwardWeight: return "backward_weight";
    default: return "comm";
  }
}

// Events sorted by rank, then start (the renderers take rows in
// first-appearance order).
std::vector<PipelineEvent> by_rank_and_start(std::vector<PipelineEvent> events) {
  std::stable_sort(events.begin(), events.end(), [](const PipelineEvent& a, const PipelineEvent& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.start_us < b.start_us;
  });
  return events;
}

// The chart itself; `unit` names the time axis ("ms" for measured events
// in microseconds, "units" for a simulation), `per_unit` converts to it.
std::string render(const std::vector<PipelineEvent>& all, int pp, int width, const char* unit, double per_unit) {
  width = std::max(width, 8);
  const bool with_stage = has_multi_stage_ranks(all);
  std::vector<PipelineEvent> events;
  for (const auto& e : by_rank_and_start(all))
    if (e.action.is_compute()) events.push_back(e);
  double t0 = 0, t1 = 0;  // the step starts at 0 on every rank (runtime.hpp)
  for (const auto& e : events) t0 = std::min(t0, e.start_us), t1 = std::max(t1, e.end_us);
  if (t1 <= t0) t1 = t0 + 1;
  const double scale = static_cast<double>(width) / (t1 - t0);
  std::ostringstream os;
  for (int r = 0; r < pp; ++r) {
    std::string line(static_cast<size_t>(width), ' ');
    int cursor = 0;  // first free column: cells never overwrite each other
    for (const auto& e : events) {
      if (e.rank != r) continue;
      int a = std::max(cursor, static_cast<int>((e.start_us - t0) * scale));
      int z = std::max(a + 1, static_cast<int>((e.end_us - t0) * scale));
      if (a >= width) a = width - 1;  // a last sliver past the edge still shows
      z = std::min(z, width);
      if (z <= a) continue;
      cursor = z;
      const int w = z - a;
      // The longest label that fits: with the stage, without, the letter.
      std::string text;
      const std::string letter = code_of(e.action.type);
      for (const std::string& l : {cell_label(e.action, with_stage), cell_label(e.action, false), letter})
        if (static_cast<int>(l.size()) + 2 <= w) {
          text = "[" + l + std::string(static_cast<size_t>(w - 2) - l.size(), '-') + "]";
          break;
        }
      if (text.empty()) text = w == 2 ? "[]" : letter.substr(0, 1);
      line.replace(static_cast<size_t>(a), static_cast<size_t>(w), text);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    os << "rank " << r << ": " << line << '\n';
  }
  char scale_line[160];
  const double span = (t1 - t0) * per_unit;
  std::snprintf(scale_line, sizeof scale_line, "        |0%*s%.*f %s|\n", width - 4 - (span >= 100 ? 3 : 2), "",
                span >= 100 ? 0 : 1, span, unit);
  os << scale_line;
  return os.str();
}

}  // namespace

bool has_multi_stage_ranks(const std::vector<PipelineEvent>& events) {
  std::map<int, std::set<int>> stages;
  for (const auto& e : events) stages[e.rank].insert(e.action.stage);
  for (const auto& [rank, s] : stages)
    if (s.size() > 1) return true;
  return false;
}

std::string cell_label(const Action& a, bool with_stage) {
  return (with_stage ? "s" + std::to_string(a.stage) : std::string()) + code_of(a.type) +
         std::to_string(a.microbatch);
}

std::vector<profiling::TimelineBar> timeline_bars(const std::vector<PipelineEvent>& events) {
  const bool with_stage = has_multi_stage_ranks(events);
  std::vector<profiling::TimelineBar> bars;
  for (const auto& e : by_rank_and_start(events))
    bars.push_back({"rank " + std::to_string(e.rank), cell_label(e.action, with_stage), e.start_us, e.end_us,
                    kind_of(e.action.type)});
  return bars;
}

std::string render_pipeline_ascii(const std::vector<PipelineEvent>& events, int pp, int width) {
  return render(events, pp, width, "ms", 1e-3);
}

std::vector<PipelineEvent> simulated_events(const SimulatedRun& sim, const std::vector<RankActions>& compute) {
  std::vector<PipelineEvent> out;
  for (size_t r = 0; r < compute.size() && r < sim.start.size(); ++r) {
    size_t i = 0;  // index among the rank's compute actions
    for (const Action& a : compute[r]) {
      if (!a.is_compute()) continue;
      if (i >= sim.start[r].size()) break;
      out.push_back({static_cast<int>(r), a, sim.start[r][i], sim.end[r][i]});
      ++i;
    }
  }
  return out;
}

std::string render_pipeline_ascii(const SimulatedRun& sim, const std::vector<RankActions>& compute, int width) {
  return render(simulated_events(sim, compute), static_cast<int>(sim.start.size()), width, "units", 1.0);
}

}  // namespace titan::pp
