// Pipeline schedules side by side on the debug model's shape: for every
// schedule (GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble,
// ZBVZeroBubble) and micro-batch count, the median step time (forward and
// backward of one step through titan's pipeline runtime, no optimizer), the
// bubble measured from the ranks' action timelines (record_events,
// gather_events, measured_bubble; mean over ranks), and next to it the
// bubble simulate() gives (F = 1, B = 2, I = W = 1, free communication) and
// the closed form analytic_bubble_fraction() (GPipe / 1F1B (p−1)/(m+p−1),
// interleaved (p−1)/(v·m+p−1); none for the zero-bubble schedules), plus
// the simulated peak of micro-batches in flight on one rank.
//
// Model: torchtitan's "debugmodel" (dim 256, 16 heads, vocab 2048) with 8
// layers instead of 6, so that the two-stages-per-rank schedules have a
// layer per stage on 4 ranks (2·p = 8 stages). pp = the number of ranks.
// A shape a schedule refuses (ScheduleSpec::validate) prints
// "refused: <reason>".
//
//   bench/pipeline/run.sh      (2 and 4 ranks, m = 4, 8, 16)
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "titan/util/measure.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/options.hpp"
#include "titan/launch/program.hpp"
#include "titan/models/llama3/model_args.hpp"
#include "titan/parallel/pipeline/simulate.hpp"
#include "titan/util/error.hpp"
#include "titan/verify/pipeline_technique.hpp"

using namespace titan;

namespace {

struct Options {
  int64_t steps = 3;    // timed steps per (schedule, m) and round
  int64_t warmup = 1;   // untimed steps first, each round
  int64_t rounds = 3;   // rounds; the shapes alternate within each
  int64_t batch = 16;   // sequences per step (divides by every m)
  int64_t seq = 32;     // tokens per sequence
  int64_t layers = 8;   // debugmodel has 6; 8 gives 2·p stages on 4 ranks
  std::string schedules = "GPipe,1F1B,Interleaved1F1B,LoopedBFS,InterleavedZeroBubble,ZBVZeroBubble";
  std::string microbatches = "4,8,16";
};

struct Row {
  std::string schedule;
  int m = 0, v = 0;
  std::string refused;  // non-empty: validate() threw
  double step_ms = 0, bubble_meas = 0, bubble_sim = 0, bubble_analytic = -1;
  int peak = 0;  // simulated micro-batches in flight, max over ranks
  std::vector<double> times, bubbles;  // per timed step, over all rounds
};

// One round of one shape: the first round fills in the shape and the
// paper figures (or the refusal); every round adds its timed steps.
void run_one(Row& row, const std::string& name, int m, const Options& o, const dist::World& world) {
  const pp::ScheduleKind kind = pp::parse_schedule_kind(name);
  row.schedule = pp::schedule_name(kind);
  row.m = m;
  pp::ScheduleSpec s;
  s.kind = kind;
  s.pp = world.size();
  s.stages_per_rank = pp::is_multi_stage(kind) ? 2 : 1;
  s.microbatches = m;
  row.v = s.stages_per_rank;
  if (!row.refused.empty()) return;
  try {
    s.validate();
    TITAN_CHECK(o.layers >= s.num_stages(), o.layers, " layers cannot fill ", s.num_stages(), " stages");
    TITAN_CHECK(o.batch % m == 0, "a batch of ", o.batch, " does not split into ", m, " micro-batches");
  } catch (const Error& e) {
    row.refused = e.what();
    return;
  }
  // On paper: the same list the runtime runs.
  const pp::SimulatedRun sim = pp::simulate(s, pp::compute_actions(s));
  row.bubble_sim = sim.mean_bubble();
  row.peak = *std::max_element(sim.peak_in_flight.begin(), sim.peak_in_flight.end());
  row.bubble_analytic = pp::analytic_bubble_fraction(s);

  verify::RunSpec spec;
  spec.model = models::llama3::flavor_args("debugmodel");
  spec.model.n_layers = o.layers;
  spec.model.max_seq_len = o.seq;
  spec.global_batch = o.batch;
  spec.seq_len = o.seq;
  spec.device = world.device();
  verify::PipelineRunOptions po;
  po.kind = kind;
  po.microbatches = m;
  po.runtime.record_events = true;
  verify::PipelineRun run = verify::build_pipeline_run(spec, world.group(), po);
  const std::vector<at::Tensor> params = run.parameters();
  for (int64_t step = 1; step <= o.warmup + o.steps; ++step) {
    const verify::MicroBatch batch = verify::local_micro_batches(spec, step, 0, 1).front();
    for (const at::Tensor& p : params)
      if (p.grad().defined()) p.mutable_grad().zero_();
    const double t0 = now_ms();
    run.runtime->step(batch.inputs, batch.labels);
    const double t1 = now_ms();
    const std::vector<double> b = pp::measured_bubble(run.runtime->gather_events(), s.pp);
    if (step <= o.warmup) continue;
    row.times.push_back(t1 - t0);
    double mean = 0;
    for (double x : b) mean += x / static_cast<double>(b.size());
    row.bubbles.push_back(mean);
  }
  row.step_ms = median(row.times);
  row.bubble_meas = median(row.bubbles);
}

std::string bubble_text(double b) {
  if (b < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", b);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    Options o;
    OptionParser p("bench_pipeline", "pipeline schedules side by side: step time, measured vs simulated vs analytic bubble");
    p.add("--steps", &o.steps, "timed steps per schedule and micro-batch count");
    p.add("--warmup", &o.warmup, "untimed steps before them, each round");
    p.add("--rounds", &o.rounds, "rounds (all shapes run once per round, so machine noise hits them alike)");
    p.add("--batch", &o.batch, "sequences per step (every micro-batch count must divide it)");
    p.add("--seq", &o.seq, "tokens per sequence");
    p.add("--layers", &o.layers, "transformer layers (debugmodel: 6; default 8 for 2 stages per rank on 4 ranks)");
    p.add("--schedules", &o.schedules, "comma-separated schedule names");
    p.add("--microbatches", &o.microbatches, "comma-separated micro-batch counts");
    p.parse(argc, argv);
    const dist::World& world = dist::init_distributed({});

    std::vector<std::pair<std::string, int>> shapes;
    for (const std::string& ms : split_commas(o.microbatches))
      for (const std::string& name : split_commas(o.schedules)) shapes.emplace_back(name, std::stoi(ms));
    std::vector<Row> rows(shapes.size());
    for (int64_t round = 0; round < o.rounds; ++round)
      for (size_t k = 0; k < shapes.size(); ++k) run_one(rows[k], shapes[k].first, shapes[k].second, o, world);

    if (world.rank() == 0) {
      std::printf("debugmodel with %lld layers, pp = %d rank(s), batch %lld x %lld tokens, %lld rounds x (%lld warm-up "
                  "+ %lld timed steps) (medians; step = forward + backward, rank 0's clock)\n",
                  static_cast<long long>(o.layers), world.size(), static_cast<long long>(o.batch),
                  static_cast<long long>(o.seq), static_cast<long long>(o.rounds), static_cast<long long>(o.warmup),
                  static_cast<long long>(o.steps));
      std::printf("%-22s %3s %2s %9s %8s %13s %13s %15s %9s\n", "schedule", "m", "v", "step ms", "x GPipe",
                  "bubble meas", "bubble sim", "bubble analytic", "peak mb");
      for (const Row& r : rows) {
        if (!r.refused.empty()) {
          std::printf("%-22s %3d %2d refused: %s\n", r.schedule.c_str(), r.m, r.v, r.refused.c_str());
          continue;
        }
        double base = 0;
        for (const Row& g : rows)
          if (g.m == r.m && g.schedule == "GPipe" && g.refused.empty()) base = g.step_ms;
        char ratio[16] = "-";
        if (base > 0) std::snprintf(ratio, sizeof ratio, "%.2f", r.step_ms / base);
        std::printf("%-22s %3d %2d %9.1f %8s %13.3f %13.3f %15s %9d\n", r.schedule.c_str(), r.m, r.v, r.step_ms,
                    ratio, r.bubble_meas, r.bubble_sim, bubble_text(r.bubble_analytic).c_str(), r.peak);
      }
      for (const Row& r : rows) {
        if (!r.refused.empty()) {
          std::printf("RESULT schedule=%s ranks=%d m=%d refused=\"%s\"\n", r.schedule.c_str(), world.size(), r.m,
                      r.refused.c_str());
          continue;
        }
        std::printf("RESULT schedule=%s ranks=%d m=%d v=%d step_ms=%.2f bubble_measured=%.4f bubble_simulated=%.4f "
                    "bubble_analytic=%.4f peak_in_flight=%d\n",
                    r.schedule.c_str(), world.size(), r.m, r.v, r.step_ms, r.bubble_meas, r.bubble_sim,
                    r.bubble_analytic, r.peak);
      }
    }
    return 0;
  });
}
