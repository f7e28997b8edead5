// Chapter 05 — Pipeline parallelism (PP).
//
// Data, FSDP and tensor parallelism all make every rank run every layer.
// Pipeline parallelism cuts the model the other way: rank r holds a
// contiguous block of layers — a *stage* — and the activations flow
// forward from stage to stage (send/recv of one [batch, seq, dim] tensor
// per boundary), the gradients flow back. Each rank stores and computes
// only its layers, and only point-to-point messages cross the ranks.
//
// The price is the *bubble*: stage r cannot start before stage r−1 has
// finished, and the last stage's backward must reach back to the first.
// Cut the batch into m micro-batches and the ranks overlap on different
// micro-batches; what idles is (p−1) forward+backward slots out of
// m+p−1 (GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2021):
//
//   naive (m = 1)   GPU 0: [F ]            [B     ]
//                   GPU 1:     [F ]    [B     ]
//                   GPU 2:         [F ][B     ]          bubble (p−1)/p
//
//   GPipe           all m forwards, then all m backwards: bubble
//                   (p−1)/(m+p−1), but every micro-batch's activations
//                   are held at the turn: memory grows with m
//   1F1B            after p−r warm-up forwards, rank r alternates one
//                   forward, one backward: the same bubble, at most p−r
//                   micro-batches in flight on rank r
//   Interleaved     v stages per rank (rank r runs stages r, r+p, ...):
//                   each slot is v times shorter, the bubble
//                   (p−1)/(v·m+p−1), for v times the messages
//   zero bubble     backward split in I (input gradient, on the critical
//                   path) and W (weight gradient, anything can wait for
//                   it): W fills the bubbles (Qi et al. 2023)
//
// This program trains the same tiny Llama 3 (8 layers) with each schedule
// on N emulated ranks and, on the same seed and batches, a single-process
// reference, and prints per schedule: (1) equivalence — loss, max |grad
// diff|, max |param diff| after the steps —, (2) the timeline of a
// measured step as an ASCII chart next to the ideal one from
// simulate(), with an SVG file each, (3) the bubble measured against the
// formula and the simulation, (4) the peak activation memory per rank.
//
//   ./build/bin/ch05_pipeline_parallel --nproc 4
//   ./build/bin/ch05_pipeline_parallel --nproc 2 --microbatches 4
//   ./build/bin/ch05_pipeline_parallel --nproc 4 --quick       # small model (CTest)
//
// Exit status 0 means every schedule matched the reference. Bubbles and
// memory are printed, not checked: emulated ranks share the machine's
// cores, so their clocks measure the scheduler of the OS as much as ours.
#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "titan/dist/world.hpp"
#include "titan/launch/options.hpp"
#include "titan/launch/program.hpp"
#include "titan/metrics/format.hpp"
#include "titan/metrics/tensor_memory.hpp"
#include "titan/models/llama3/pipeline.hpp"
#include "titan/ops/cross_entropy.hpp"
#include "titan/parallel/pipeline/runtime.hpp"
#include "titan/parallel/pipeline/schedule.hpp"
#include "titan/parallel/pipeline/simulate.hpp"
#include "titan/parallel/pipeline/timeline.hpp"
#include "titan/util/strprintf.hpp"
#include "titan/verify/pipeline_technique.hpp"
#include "titan/util/error.hpp"
#include "titan/verify/reference_run.hpp"

using namespace titan;
using namespace titan::verify;
using pp::ScheduleKind;

namespace {

struct Options {
  int64_t steps = 2;
  int64_t microbatches = 8;
  int64_t batch = 8;
  int64_t dim = 256;
  int64_t seq_len = 64;
  int64_t layers = 8;
  int64_t width = 0;  // 0: 4 characters per unit of the ideal step, 60 to 240
  std::string out_dir;
  bool quick = false;
};

// One way of running the pipeline.
struct Variant {
  std::string name;
  ScheduleKind kind;
  int microbatches;
};

// What one schedule's run left, on rank 0 (gathered where per rank).
struct Result {
  Variant variant;
  pp::ScheduleSpec spec;
  std::string plan;
  bool ok = true;
  double last_loss = 0, dloss = 0, dgrad = 0, dparam = 0;
  std::vector<pp::PipelineEvent> events;  // every rank's, of the measured step
  std::vector<double> bubble;             // measured, per rank
  double step_ms = 0;                     // the measured step's span
  std::vector<double> peak_bytes;         // per rank
  pp::SimulatedRun sim;                   // unit costs: F = 1, B = 2, I = W = 1
  pp::SimulatedRun sim_measured;          // the measured mean cost of each action type
  pp::ActionCosts measured_costs;         // ms
  std::vector<pp::RankActions> compute;
};

// Every rank's `v`, on every rank.
std::vector<double> per_rank(const dist::ProcessGroup& g, double v, int rank, int n) {
  at::Tensor t = at::zeros({n}, at::TensorOptions().dtype(at::kDouble));
  t[rank] = v;
  g.all_reduce(t, dist::ReduceOp::Sum);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + n);
}

// Mean duration (ms) of each compute action type in a measured step: the
// costs to re-simulate the schedule with, so that what the runtime does
// differently from F = 1, B = 2 (the W's recomputation, the stages'
// unequal work) shows up in the ideal picture too.
pp::ActionCosts measured_costs(const std::vector<pp::PipelineEvent>& events) {
  std::map<pp::ActionType, std::pair<double, int>> sum;
  for (const auto& e : events)
    if (e.action.is_compute()) sum[e.action.type].first += (e.end_us - e.start_us) / 1e3, sum[e.action.type].second++;
  auto mean = [&](pp::ActionType t, double fallback) {
    return sum.count(t) ? sum[t].first / sum[t].second : fallback;
  };
  pp::ActionCosts c;
  c.forward = mean(pp::ActionType::Forward, 1);
  c.backward = mean(pp::ActionType::Backward, 2 * c.forward);
  c.backward_input = mean(pp::ActionType::BackwardInput, c.forward);
  c.backward_weight = mean(pp::ActionType::BackwardWeight, c.forward);
  return c;
}

std::string slug(const std::string& name) {
  std::string s;
  for (char ch : name) s += std::isalnum(static_cast<unsigned char>(ch)) ? static_cast<char>(std::tolower(ch)) : '_';
  return s;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

std::string pct(double f) { return f < 0 ? "-" : titan::strprintf("%.1f%%", 100 * f); }

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    Options opt;
    OptionParser parser("ch05_pipeline_parallel",
                        "pipeline schedules (naive, GPipe, 1F1B, interleaved, zero bubble) against a single-process "
                        "reference, with their timelines, bubbles and activation memory");
    parser.add("--steps", &opt.steps, "AdamW steps per schedule (then one more step is measured)");
    parser.add("--microbatches", &opt.microbatches, "micro-batches per step (m; the naive run uses 1)");
    parser.add("--batch", &opt.batch, "sequences per step (must divide by --microbatches)");
    parser.add("--dim", &opt.dim, "model width: large enough that compute dominates the messages");
    parser.add("--seq-len", &opt.seq_len, "tokens per sequence");
    parser.add("--layers", &opt.layers, "transformer layers (cut into N stages, 2N for interleaved schedules)");
    parser.add("--width", &opt.width, "characters of the ASCII timelines (0: 4 per forward of the ideal step, 60-240)");
    parser.add("--out-dir", &opt.out_dir, "where the SVG timelines go (default /tmp/titan_ch05_npN)");
    parser.flag("--quick", &opt.quick, "small model and one step (CTest): dim 64, seq 16");
    parser.parse(argc, argv);
    if (opt.quick) opt.dim = 64, opt.seq_len = 16, opt.steps = 1;

    const dist::World& world = dist::init_distributed({.device = "cpu"});
    const int rank = world.rank(), n = world.size();
    const bool chatty = rank == 0;
    const dist::ProcessGroup& group = *world.group();
    // Count CPU tensor bytes from here on: the activation memory readings.
    metrics::track_cpu_tensor_memory();
    if (opt.out_dir.empty()) opt.out_dir = "/tmp/titan_ch05_np" + std::to_string(n);

    RunSpec spec;
    spec.model.n_layers = opt.layers;
    spec.model.dim = opt.dim;
    spec.model.max_seq_len = std::max<int64_t>(spec.model.max_seq_len, opt.seq_len);
    spec.seq_len = opt.seq_len;
    spec.global_batch = opt.batch;
    spec.steps = opt.steps;
    spec.device = world.device();
    spec.validate(1);
    TITAN_CHECK(opt.batch % opt.microbatches == 0, "--batch ", opt.batch, " does not split into --microbatches ",
                opt.microbatches);
    const int m = static_cast<int>(opt.microbatches);

    // The schedules, and a one-line error now for a shape one of them
    // cannot run (rather than after the others have trained).
    const std::vector<Variant> variants = {
        {"naive", ScheduleKind::GPipe, 1},
        {"GPipe", ScheduleKind::GPipe, m},
        {"1F1B", ScheduleKind::OneFOneB, m},
        {"Interleaved1F1B", ScheduleKind::Interleaved1F1B, m},
        {"InterleavedZeroBubble", ScheduleKind::InterleavedZeroBubble, m},
        {"ZBVZeroBubble", ScheduleKind::ZBVZeroBubble, m},
    };
    TITAN_CHECK(m >= n, "--microbatches ", m, " is fewer than the ", n,
                " pipeline ranks: 1F1B and the interleaved and zero-bubble schedules need at least one per rank");
    TITAN_CHECK(m % n == 0, "--microbatches ", m, " does not divide by the ", n,
                " pipeline ranks, which Interleaved1F1B needs (Megatron's rule)");
    for (const Variant& v : variants) models::llama3::plan_pipeline(opt.layers, v.kind, n, v.microbatches);

    if (chatty) {
      std::printf("Chapter 05: pipeline parallelism on %d emulated rank(s), fp32, device %s\n", n,
                  spec.device.str().c_str());
      std::printf("model: tiny Llama 3 (dim %lld, %lld layers, %lld/%lld heads, vocab %lld); batch %lld x %lld tokens "
                  "per step, cut into m = %d micro-batches; AdamW lr %g; %lld steps\n\n",
                  (long long)spec.model.dim, (long long)spec.model.n_layers, (long long)spec.model.n_heads,
                  (long long)spec.model.kv_heads(), (long long)spec.model.vocab_size, (long long)spec.global_batch,
                  (long long)spec.seq_len, m, spec.optimizer.lr, (long long)spec.steps);
    }

    // ------------------------------------------------ the reference
    // One process, the whole model, the whole batch: what every schedule
    // must reproduce. Rank 0 alone computes it (the others wait at the
    // first pipeline's set-up), which leaves it the machine's cores.
    Trajectory ref;
    if (rank == 0) ref = train_reference(spec);

    // ------------------------------------------------ the schedules
    // Pipeline tolerances as tests/parallel/test_pipeline.cpp: micro-batches
    // sum each gradient in another order than the one batch of the
    // reference — rounding only. Loss and gradients 1e-6 relative + 1e-7;
    // parameters adam_param_tolerance (AdamW magnifies a near-zero
    // gradient's rounding up to ~lr).
    const Tolerance tol{1e-6, 1e-7};
    const Tolerance param_tol = adam_param_tolerance(spec.optimizer.lr);
    std::filesystem::create_directories(opt.out_dir);

    std::vector<Result> results;
    bool ok = true;
    for (const Variant& v : variants) {
      Result res;
      res.variant = v;
      // The pipeline, built as the trainer builds it (models/llama3/
      // pipeline.hpp): the plan (the schedule, and which layers each stage
      // holds), the whole model cut into the stages this rank runs, one
      // PipelineStage per part (what a stage exchanges: one micro-batch's
      // [sequences, tokens, dim] hidden states), and the runtime that walks
      // this rank's action list, sending and receiving over the group.
      PipelineRun run;
      run.pp_group = world.group();
      run.plan = models::llama3::plan_pipeline(spec.model.n_layers, v.kind, n, v.microbatches);
      run.parts = models::llama3::pipeline_llama(build_model(spec, spec.model_seed), run.plan, rank);
      models::llama3::StageSetup setup;
      setup.activation_shape = {spec.global_batch / v.microbatches, spec.seq_len, spec.model.dim};
      setup.dtype = spec.dtype;
      setup.device = spec.device;
      // The last stage's loss: each micro-batch's mean cross-entropy (the
      // runtime scales each by 1/m, so the step's loss is the batch's mean).
      setup.loss_fn = [](const at::Tensor& logits, const at::Tensor& labels) {
        return ops::cross_entropy(logits, labels);
      };
      run.stages = models::llama3::pipeline_stages(run.parts, run.plan, rank, setup);
      pp::RuntimeOptions ro;
      ro.record_events = true;   // a barrier starts each step: one clock zero for all ranks
      ro.measure_memory = true;  // peak tensor bytes above the step's start
      run.runtime = std::make_shared<pp::PipelineRuntime>(run.plan.spec, run.stages, run.pp_group, ro);
      res.spec = run.plan.spec;
      res.plan = run.plan.describe();

      // (1) train spec.steps steps and compare with the reference.
      auto optimizer = build_optimizer(spec, run.parameters());
      const Trajectory got = run_steps(spec, run.parts.front(), *optimizer, 0, 1, pipeline_technique(run, spec));
      if (rank == 0) {
        for (const StepDiff& d : compare(ref, got, tol, param_tol)) {
          res.dloss = std::max(res.dloss, d.loss), res.dgrad = std::max(res.dgrad, d.grads.max_abs);
          res.dparam = std::max(res.dparam, d.params.max_abs);
          res.ok = res.ok && d.ok();
        }
        res.last_loss = got.steps.back().loss;
      }
      res.ok = per_rank(group, res.ok ? 0.0 : 1.0, rank, n)[0] == 0.0;
      ok = ok && res.ok;

      // (2)-(4) one more step, measured. The gradients are zeroed in place
      // (their storage stays), so the peak above the step's start is the
      // activations the schedule keeps alive, plus one micro-batch's
      // transient buffers.
      for (auto& p : run.parameters())
        if (p.grad().defined()) p.mutable_grad().zero_();
      const MicroBatch batch = local_micro_batches(spec, 1, 0, 1).front();
      const pp::PipelineStepResult step = run.runtime->step(batch.inputs, batch.labels);
      res.events = run.runtime->gather_events();
      res.peak_bytes = per_rank(group, static_cast<double>(step.peak_activation_bytes), rank, n);
      res.bubble = pp::measured_bubble(res.events, n);
      for (const auto& e : res.events) res.step_ms = std::max(res.step_ms, e.end_us / 1e3);
      res.compute = pp::compute_actions(res.spec);
      res.sim = pp::simulate(res.spec, res.compute);
      res.measured_costs = measured_costs(res.events);
      res.sim_measured = pp::simulate(res.spec, res.compute, res.measured_costs);

      if (chatty) {
        // Wide enough that a forward of the ideal step gets "[F0]".
        const int width = opt.width > 0 ? static_cast<int>(opt.width)
                                        : std::clamp(static_cast<int>(4 * res.sim.makespan), 60, 240);
        std::printf("=== %s: %s\n", v.name.c_str(), res.plan.c_str());
        std::printf("ideal step (simulate, F = 1, B = 2, I = W = 1 units; bubble %s):\n%s", pct(res.sim.mean_bubble()).c_str(),
                    pp::render_pipeline_ascii(res.sim, res.compute, width).c_str());
        std::printf("measured step (bubble %s):\n%s", pct(mean(res.bubble)).c_str(),
                    pp::render_pipeline_ascii(res.events, n, width).c_str());
        const std::string base = opt.out_dir + "/" + slug(v.name);
        std::ofstream(base + ".svg") << profiling::render_svg(pp::timeline_bars(res.events),
                                                              "measured: " + res.plan);
        std::ofstream(base + "_ideal.svg") << profiling::render_svg(
            pp::timeline_bars(pp::simulated_events(res.sim, res.compute)), "ideal (time in units): " + res.plan);
        std::printf("SVG (with the sends and receives): %s.svg, ideal: %s_ideal.svg\n\n", base.c_str(), base.c_str());
      }
      results.push_back(std::move(res));
    }

    if (!chatty) return ok ? 0 : 1;

    // ------------------------------------------------ (1) equivalence
    std::printf("1. equivalence with the single-process reference, worst step of %lld\n", (long long)spec.steps);
    std::printf("   %-22s %14s %10s %12s %12s\n", "schedule", "last loss", "|dloss|", "max|dgrad|", "max|dparam|");
    std::printf("   %-22s %14.8f\n", "reference", ref.steps.back().loss);
    for (const Result& r : results)
      std::printf("   %-22s %14.8f %10.3g %12.3g %12.3g%s\n", r.variant.name.c_str(), r.last_loss, r.dloss, r.dgrad,
                  r.dparam, r.ok ? "" : "  <-- outside tolerance");
    std::printf("   tolerance: loss and grads |d| <= %g + %g|ref|; params |d| <= %g + %g|ref|\n\n", tol.atol, tol.rtol,
                param_tol.atol, param_tol.rtol);

    // ------------------------------------------------ (2) bubbles
    std::printf("2. bubble = idle / step time, mean over ranks (measured: 1 - time in F/B/I/W / span of the step)\n");
    std::printf("   %-22s %3s %2s %9s %10s %14s %9s %16s %9s\n", "schedule", "m", "v", "analytic", "simulated",
                "sim. measured", "measured", "measured per rank", "step ms");
    for (const Result& r : results) {
      std::string ranks;
      for (double b : r.bubble) ranks += titan::strprintf("%s%.0f", ranks.empty() ? "" : " ", 100 * b);
      std::printf("   %-22s %3d %2d %9s %10s %14s %9s %16s %9.1f\n", r.variant.name.c_str(), r.spec.microbatches,
                  r.spec.stages_per_rank, pct(pp::analytic_bubble_fraction(r.spec)).c_str(),
                  pct(r.sim.mean_bubble()).c_str(), pct(r.sim_measured.mean_bubble()).c_str(),
                  pct(mean(r.bubble)).c_str(), ranks.c_str(), r.step_ms);
    }
    std::printf("   analytic: (p-1)/(m+p-1), interleaved (p-1)/(v*m+p-1) (Narayanan et al. 2021), none for zero bubble;\n"
                "   simulated: simulate() with F = 1, B = 2, I = W = 1; sim. measured: simulate() with the mean measured\n"
                "   duration of each action type; measured per rank in %%, rank 0 first\n");
    std::printf("   mean measured action durations (ms):\n");
    for (const Result& r : results) {
      const auto& c = r.measured_costs;
      if (pp::splits_backward(r.spec.kind))
        std::printf("   %-22s F %.2f  I %.2f  W %.2f  (I + W = %.2f F)\n", r.variant.name.c_str(), c.forward,
                    c.backward_input, c.backward_weight, (c.backward_input + c.backward_weight) / c.forward);
      else
        std::printf("   %-22s F %.2f  B %.2f  (B = %.2f F)\n", r.variant.name.c_str(), c.forward, c.backward,
                    c.backward / c.forward);
    }
    std::printf("   I runs the backward to the stage's input only; W then runs each matmul's and norm's weight half\n"
                "   from the gradient I left there (split_backward.hpp), so I + W does the work of one B.\n"
                "   %d emulated ranks share this machine's cores, so measured times are noisy (printed, not checked).\n\n",
                n);

    // ------------------------------------------------ (3) memory
    std::printf("3. peak activation memory per rank in the measured step (KiB above the step's start) and the\n"
                "   (stage, micro-batch) activations a rank holds at once (simulate; naive: its 1 micro-batch is the whole batch)\n");
    std::printf("   %-22s", "schedule");
    for (int r = 0; r < n; ++r) std::printf(" %12s", titan::strprintf("rank %d", r).c_str());
    std::printf("   in flight per rank\n");
    for (const Result& r : results) {
      std::printf("   %-22s", r.variant.name.c_str());
      for (double b : r.peak_bytes) std::printf(" %12.1f", b / 1024.0);
      std::string fl;
      for (int f : r.sim.peak_in_flight) fl += titan::strprintf("%s%d", fl.empty() ? "" : " ", f);
      std::printf("   %s\n", fl.c_str());
    }
    const Result& gpipe = results[1];
    const Result& ofob = results[2];
    std::printf("   GPipe / 1F1B per rank:");
    for (int r = 0; r < n; ++r)
      std::printf(" %.2f (m/(p-r) = %.2f)%s", gpipe.peak_bytes[r] / ofob.peak_bytes[r],
                  double(m) / std::min(m, n - r), r + 1 < n ? "," : "\n");
    std::printf("   GPipe holds all m micro-batches at its turn; 1F1B at most p - r on rank r (1 on the last).\n\n");

    std::printf("%s\n", ok ? "OK: every schedule matches the single-process reference"
                           : "FAIL: a schedule does not match the reference");
    return ok ? 0 : 1;
  });
}
