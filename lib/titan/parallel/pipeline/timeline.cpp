#include "titan/parallel/pipeline/timeline.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <cstring>

namespace titan::pp {
namespace {

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
  const bool multi = has_multi_stage_ranks(all);
  std::vector<PipelineEvent> events;
  for (const auto& e : by_rank_and_start(all))
    if (e.action.is_compute()) events.push_back(e);
  double t0 = 0, t1 = 0;  // the step starts at 0 on every rank (runtime.hpp)
  for (const auto& e : events) t0 = std::min(t0, e.start_us), t1 = std::max(t1, e.end_us);
  if (t1 <= t0) t1 = t0 + 1;
  const double scale = static_cast<double>(width) / (t1 - t0);

  // Layout first: the columns [a, z) of every cell (cells never overlap).
  struct Cell {
    const PipelineEvent* e;
    int a, z;
  };
  std::vector<Cell> cells;
  std::map<int, int> cursor;  // per rank: the first free column
  for (const auto& e : events) {
    if (e.rank < 0 || e.rank >= pp) continue;
    int a = std::max(cursor[e.rank], static_cast<int>((e.start_us - t0) * scale));
    int z = std::max(a + 1, static_cast<int>((e.end_us - t0) * scale));
    if (a >= width) a = width - 1;  // a last sliver past the edge still shows
    z = std::min(z, width);
    if (z <= a) continue;
    cursor[e.rank] = z;
    cells.push_back({&e, a, z});
  }
  // Multi-stage ranks: the stage goes in the label when every cell has
  // room for it; otherwise a rank's stages are told apart by their
  // brackets, [..] for its first, (..) for its second, {..}, <..>.
  bool with_stage = multi;
  for (const Cell& c : cells)
    with_stage = with_stage && static_cast<int>(cell_label(c.e->action, true).size()) + 2 <= c.z - c.a;
  std::map<int, std::vector<int>> stages_of;  // rank -> its stages, in order
  for (const auto& e : events) {
    auto& v = stages_of[e.rank];
    if (std::find(v.begin(), v.end(), e.action.stage) == v.end()) v.push_back(e.action.stage);
  }
  for (auto& [r, v] : stages_of) std::sort(v.begin(), v.end());
  static const char* kBrackets[] = {"[]", "()", "{}", "<>"};
  auto brackets = [&](const PipelineEvent& e) {
    if (!multi || with_stage) return kBrackets[0];
    const auto& v = stages_of[e.rank];
    const auto i = std::find(v.begin(), v.end(), e.action.stage) - v.begin();
    return kBrackets[std::min<long>(i, 3)];
  };

  std::vector<std::string> lines(static_cast<size_t>(pp), std::string(static_cast<size_t>(width), ' '));
  for (const Cell& c : cells) {
    const int w = c.z - c.a;
    const char* br = brackets(*c.e);
    const std::string letter = action_code(c.e->action.type);
    std::string text;  // the longest label that fits: the chosen one, then the letter
    for (const std::string& l : {cell_label(c.e->action, with_stage), letter})
      if (static_cast<int>(l.size()) + 2 <= w) {
        text = br[0] + l + std::string(static_cast<size_t>(w - 2) - l.size(), '-') + br[1];
        break;
      }
    if (text.empty()) text = w == 2 ? std::string(br) : letter;
    lines[static_cast<size_t>(c.e->rank)].replace(static_cast<size_t>(c.a), static_cast<size_t>(w), text);
  }
  std::ostringstream os;
  for (int r = 0; r < pp; ++r) {
    std::string& line = lines[static_cast<size_t>(r)];
    while (!line.empty() && line.back() == ' ') line.pop_back();
    os << "rank " << r << ": " << line << '\n';
  }
  const double span = (t1 - t0) * per_unit;
  char end[64];
  std::snprintf(end, sizeof end, "%.*f %s|", span >= 100 ? 0 : 1, span, unit);
  const int pad = std::max(1, width - 1 - static_cast<int>(std::strlen(end)));
  os << "        |0" << std::string(static_cast<size_t>(pad), ' ') << end << '\n';
  if (multi && !with_stage) os << "        [..] a rank's first stage, (..) its second (stages_of_rank order)\n";
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
  return (with_stage ? "s" + std::to_string(a.stage) : std::string()) + action_code(a.type) +
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
