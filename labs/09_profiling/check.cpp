// Lab 09 checker: your ranges (profiled_attention.cpp) recorded by titan's
// TraceProfiler around three calls of profiled_attention, each rank writing
// its own trace; then
//   ranges: the checker's own reading of the trace finds "lab09::scores",
//           "lab09::softmax" and "lab09::weighted_sum" three times each,
//           in that order within each call, with a matmul inside scores and
//           weighted_sum and the softmax inside softmax;
//   find:   your find_events() returns exactly the events the checker found
//           (names, starts, durations) for each range and for "aten::softmax";
//   values: the result equals softmax(q kᵀ/√d) v computed without ranges
//           (bitwise: the ranges must not change the arithmetic).
//
//   labs/check.sh 09           (builds lab09_check from starter/ and runs it)
//   build/bin/lab09_check --nproc 2
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "lab_check.hpp"
#include "profiled_attention.hpp"
#include "titan/util/files.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/program.hpp"
#include "titan/metrics/format.hpp"
#include "titan/profiling/trace_profiler.hpp"
#include "titan/util/strprintf.hpp"

using namespace titan;
using lab09::TraceEvent;

namespace {

std::vector<TraceEvent> all_events(const std::string& path) {
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::vector<TraceEvent> out;
  for (const auto& e : trace.at("traceEvents"))
    if (e.value("ph", "") == "X") out.push_back({e.value("name", ""), e.value("ts", 0.0), e.value("dur", 0.0)});
  return out;
}

bool contains(const TraceEvent& outer, const TraceEvent& inner) {
  return inner.ts >= outer.ts && inner.ts + inner.dur <= outer.ts + outer.dur;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int, char**) {
    const dist::World& world = dist::init_distributed({.device = "cpu"});
    const int rank = world.rank(), n = world.size();
    const std::string dir = files::temp_dir() + "/titan_lab09_np" + std::to_string(n);
    if (rank == 0) files::remove_all(dir);
    world.group()->barrier();

    const at::Tensor q = lab::seeded(1, {2, 64, 32}), k = lab::seeded(2, {2, 64, 32}), v = lab::seeded(3, {2, 64, 32});
    at::Tensor out;
    {
      // One recorded "step" holding three calls.
      profiling::TraceProfiler profiler({/*freq=*/1, /*warmup=*/0, /*active=*/1}, dir, rank, /*cuda=*/false);
      profiler.step_begin(1);
      for (int i = 0; i < 3; ++i) out = lab09::profiled_attention(q, k, v);
      profiler.step_end(1);
    }
    const std::string path = dir + "/iteration_1/rank" + std::to_string(rank) + "_trace.json";
    const std::vector<TraceEvent> events = all_events(path);
    auto named = [&](const std::string& name) {
      std::vector<TraceEvent> r;
      for (const auto& e : events)
        if (e.name == name) r.push_back(e);
      return r;
    };

    // ranges
    const auto scores = named("lab09::scores"), softmax = named("lab09::softmax"), wsum = named("lab09::weighted_sum");
    std::string problem;
    if (scores.size() != 3 || softmax.size() != 3 || wsum.size() != 3) {
      problem = titan::strprintf("found %zu scores, %zu softmax and %zu weighted_sum ranges; want 3 of each", scores.size(),
                         softmax.size(), wsum.size());
    } else {
      for (int i = 0; i < 3 && problem.empty(); ++i) {
        if (!(scores[i].ts < softmax[i].ts && softmax[i].ts < wsum[i].ts))
          problem = "call " + std::to_string(i) + ": the ranges are not in the order scores, softmax, weighted_sum";
        bool mm_in_scores = false, mm_in_sum = false, sm_in_softmax = false;
        for (const auto& e : events) {
          mm_in_scores |= (e.name == "aten::matmul" || e.name == "aten::bmm") && contains(scores[i], e);
          mm_in_sum |= (e.name == "aten::matmul" || e.name == "aten::bmm") && contains(wsum[i], e);
          sm_in_softmax |= e.name == "aten::softmax" && contains(softmax[i], e);
        }
        if (problem.empty() && !(mm_in_scores && mm_in_sum && sm_in_softmax))
          problem = "call " + std::to_string(i) + ": a range does not hold its op (matmul / softmax / matmul)";
      }
    }
    const double bad_ranges = lab::global_max(problem.empty() ? 0 : 1);
    lab::report(bad_ranges == 0, "ranges",
                problem.empty() ? (bad_ranges == 0 ? "3 calls x (scores > matmul, softmax > softmax, weighted_sum > matmul), in order"
                                                   : "wrong on another rank")
                                : problem);

    // find
    std::string find_problem;
    for (const std::string name : {"lab09::scores", "lab09::softmax", "lab09::weighted_sum", "aten::softmax"}) {
      const auto want = named(name);
      const auto got = lab09::find_events(path, name);
      bool same = got.size() == want.size();
      for (size_t i = 0; same && i < got.size(); ++i)
        same = got[i].name == want[i].name && got[i].ts == want[i].ts && got[i].dur == want[i].dur;
      if (!same && find_problem.empty())
        find_problem = titan::strprintf("%s: find_events returned %zu events, the trace has %zu", name.c_str(), got.size(),
                                want.size());
    }
    const double bad_find = lab::global_max(find_problem.empty() ? 0 : 1);
    lab::report(bad_find == 0, "find", find_problem.empty() ? "the same events as the checker's reading, 4 names"
                                                            : find_problem);

    // values
    const at::Tensor ref = at::matmul(at::softmax(at::matmul(q, k.transpose(-2, -1)) / std::sqrt(32.0), -1), v);
    const double diff = lab::global_max((out - ref).abs().max().item<double>());
    lab::report(diff == 0, "values", titan::strprintf("max |out - reference| %.3g", diff));

    world.group()->barrier();
    if (rank == 0) files::remove_all(dir);
    return lab::finish();
  });
}
