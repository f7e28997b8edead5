// Chapter 09 — Profiling: traces, memory timelines, TensorBoard.
//
// "Why is my step slow, and where does the memory go?" has to be answered
// with measurements of the run itself. Three instruments, all switched on
// by [profiling] / [metrics] keys of `titan train`:
//
//   traces      Kineto (the profiler inside LibTorch that torch.profiler
//               drives) records every ATen op — and on a GPU every kernel —
//               with its start and duration, plus the ranges titan names:
//               the step, data loading, forward, backward, clipping, the
//               optimizer, FSDP's all-gathers and reduce-scatters, every
//               collective. One Chrome/Perfetto JSON per rank:
//               profile_traces/iteration_N/rank<r>_trace.json.
//   memory      the step's tensor bytes at its boundaries, split into
//               parameters, gradients, optimizer state, FSDP's gathered
//               weights and activations/temporaries, with each phase's
//               peak (memory_snapshot/iteration_N/rank<r>_memory_timeline.*;
//               on a GPU also the allocator history for memory_viz).
//   TensorBoard loss, LR, throughput, MFU, memory per logged step
//               (tb/<timestamp>/events.out.tfevents.*).
//
// torchtitan's schedule decides which steps are recorded: in every window
// of profile_freq steps, wait, warm up `profiler_warmup` steps, record
// `profiler_active` steps.
//
// This program trains a small Llama 3 under FSDP on N ranks with all three
// on, then reads the files back: the ranges of rank 0's trace ranked by
// time (and how much of the step they cover), each rank's compute against
// communication, and the memory timeline. It exits non-zero if a file or
// an expected range is missing.
//
//   ./build/bin/ch09_profiling --nproc 2
//   ./build/bin/ch09_profiling --nproc 2 --keep       # keep the files to open them
//   ./build/bin/ch09_profiling --nproc 2 --trace-svg step.svg   # draw the recorded step
//   ./build/bin/ch09_profiling --nproc 2 --quick      # CTest
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "titan/util/files.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/options.hpp"
#include "titan/launch/program.hpp"
#include "titan/metrics/format.hpp"
#include "titan/ops/gemm/cpu_matmul.hpp"
#include "titan/profiling/timeline.hpp"
#include "titan/profiling/trace_reader.hpp"
#include "titan/train/trainer.hpp"
#include "titan/util/strprintf.hpp"

using namespace titan;
using titan::strprintf;

namespace {

using profiling::TraceEvent;

// "fsdp::all_gather layers.0" -> "fsdp::all_gather", "c10d::all_reduce dp_shard" -> "c10d::all_reduce".
std::string range_kind(const std::string& name) { return name.substr(0, name.find(' ')); }

// An op: ATen's, or titan::mm, the GEMM that titan's Linear layers run
// through oneDNN on the CPU ([model] cpu_matmul), recorded as aten::mm is.
bool is_op(const std::string& n) { return n.rfind("aten::", 0) == 0 || n == ops::kOnednnMmRecord; }

bool is_titan_range(const std::string& n) {
  return !is_op(n) && (n.rfind("titan::", 0) == 0 || n.rfind("fsdp::", 0) == 0 || n.rfind("c10d::", 0) == 0);
}

// The recorded step drawn as a timeline, one row per kind of range: the
// train step's phases, titan's fused kernels, FSDP's all-gathers and
// reduce-scatters, the other collectives, and the ops (ATen's, titan::mm)
// that take at least 1 % of the step (the rest would be hairlines). An
// excerpt of what Perfetto shows, for the page.
std::vector<profiling::TimelineBar> step_timeline(const std::vector<TraceEvent>& events, const TraceEvent& step) {
  std::vector<profiling::TimelineBar> bars;
  for (const TraceEvent& e : events) {
    if (!step.contains(e) || e.name.rfind("ProfilerStep", 0) == 0) continue;
    const std::string kind = range_kind(e.name);
    std::string row, label = e.name.substr(e.name.find("::") + 2), style = "compute";
    static const std::vector<std::string> phases = {"titan::data_loading", "titan::forward",   "titan::backward",
                                                    "titan::clip_grad_norm", "titan::optimizer", "titan::pipeline_step"};
    if (std::find(phases.begin(), phases.end(), kind) != phases.end()) {
      row = "1 the step's phases";
    } else if (is_op(e.name)) {
      if (e.dur < 0.01 * step.dur) continue;
      row = "6 ops >= 1% of the step";
    } else if (e.name.rfind("titan::", 0) == 0) {
      row = "2 titan's kernels";  // the fused ops' and ring attention's own ranges
    } else if (kind == "fsdp::all_gather") {
      row = "3 FSDP all-gather", style = "comm", label = label.substr(label.find(' ') + 1);
    } else if (kind == "fsdp::reduce_scatter") {
      row = "4 FSDP reduce-scatter", style = "comm", label = label.substr(label.find(' ') + 1);
    } else if (e.name.rfind("c10d::", 0) == 0) {
      row = "5 other collectives", style = "comm";
    } else {
      continue;
    }
    bars.push_back({row, label, e.ts - step.ts, e.ts - step.ts + e.dur, style});
  }
  // Rows in their numbered order (render_svg keeps first appearance).
  std::stable_sort(bars.begin(), bars.end(), [](const auto& a, const auto& b) { return a.row < b.row; });
  return bars;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    int64_t dim = 256, layers = 4, steps = 4;
    bool quick = false, keep = false;
    std::string trace_svg;
    OptionParser parser("ch09_profiling", "Kineto traces, memory timelines and TensorBoard of a training run, read back");
    parser.add("--dim", &dim, "model width");
    parser.add("--layers", &layers, "transformer layers");
    parser.add("--steps", &steps, "training steps (the last is recorded)");
    parser.flag("--quick", &quick, "small model (CTest)");
    parser.flag("--keep", &keep, "keep the traces, memory timelines and TensorBoard files (removed at the end otherwise)");
    parser.add("--trace-svg", &trace_svg, "also draw rank 0's recorded step as a timeline (an excerpt of its trace)");
    parser.parse(argc, argv);
    if (quick) dim = 64, layers = 2, steps = 2;

    const dist::World& world = dist::init_distributed({.device = "cpu"});
    const int rank = world.rank(), n = world.size();
    const dist::ProcessGroup& group = *world.group();
    const std::string dump = files::temp_dir() + "/titan_ch09_np" + std::to_string(n);
    if (rank == 0) files::remove_all(dump);
    group.barrier();

    // ------------------------------------------------ the run
    config::JobConfig cfg;
    cfg.job.dump_folder = dump;
    cfg.training.device = "cpu";
    cfg.training.seq_len = 64;
    cfg.training.batch_size = 2;
    cfg.training.steps = steps;
    cfg.training.mixed_precision_param = "float32";
    cfg.metrics.log_freq = 1;
    cfg.metrics.enable_tensorboard = true;
    cfg.profiling.enable_profiling = true;
    cfg.profiling.enable_memory_snapshot = true;
    cfg.profiling.profile_freq = steps;  // the last step: warmed-up, steady state
    cfg.profiling.profiler_warmup = 1;
    cfg.profiling.profiler_active = 1;
    train::TrainerOptions o;
    models::llama3::ModelArgs a = models::llama3::flavor_args("debugmodel");
    a.dim = dim, a.n_layers = layers;
    o.model_args = a;
    o.console = false;
    o.handle_signals = false;
    o.peak_flops = 0;
    train::Trainer trainer(cfg, o);
    const train::TrainSummary summary = trainer.train();
    group.barrier();
    bool ok = true;

    const std::string it = "/iteration_" + std::to_string(steps);
    if (rank == 0) {
      std::printf("1. trained %lld steps of a %lld-layer, dim-%lld Llama 3 under FSDP %d; step %lld recorded:\n",
                  static_cast<long long>(steps), static_cast<long long>(layers), static_cast<long long>(dim), n,
                  static_cast<long long>(steps));
      for (int r = 0; r < n; ++r)
        for (const std::string& f : {dump + "/profile_traces" + it + "/rank" + std::to_string(r) + "_trace.json",
                                     dump + "/memory_snapshot" + it + "/rank" + std::to_string(r) + "_memory_timeline.svg"}) {
          const bool there = files::is_regular_file(f);
          ok = ok && there;
          std::printf("   %s %s\n", there ? "   " : "MISSING", f.c_str());
        }
      std::printf("   TensorBoard: tensorboard --logdir %s\n", summary.tensorboard_dir.c_str());
      std::printf("   Open a trace in https://ui.perfetto.dev (or chrome://tracing); the SVGs in a browser.\n\n");

      // ------------------------------------------------ (2) the ranges
      const std::vector<TraceEvent> events = profiling::read_trace_events(dump + "/profile_traces" + it + "/rank0_trace.json");
      const TraceEvent* step = nullptr;
      for (const auto& e : events)
        if (e.name == "ProfilerStep#" + std::to_string(steps)) step = &e;
      ok = ok && step != nullptr;
      std::map<std::string, std::pair<double, int>> by_kind;  // total us, count
      std::map<std::string, std::pair<double, int>> ops;
      for (const auto& e : events) {
        if (is_titan_range(e.name)) {
          auto& k = by_kind[range_kind(e.name)];
          k.first += e.dur, k.second += 1;
        } else if (is_op(e.name)) {
          auto& k = ops[e.name];
          k.first += e.dur, k.second += 1;
        }
      }
      const double step_us = step ? step->dur : 1;
      std::printf("2. rank 0's step %lld took %.1f ms; titan's ranges in it (total time, share of the step):\n",
                  static_cast<long long>(steps), step_us / 1e3);
      std::vector<std::pair<std::string, std::pair<double, int>>> sorted(by_kind.begin(), by_kind.end());
      std::sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.second.first > y.second.first; });
      for (const auto& [name, v] : sorted)
        std::printf("   %-28s %9.2f ms %6.1f%%  x%d\n", name.c_str(), v.first / 1e3, 100 * v.first / step_us, v.second);
      for (const char* need : {"titan::forward", "titan::backward", "titan::optimizer", "fsdp::all_gather",
                               "fsdp::reduce_scatter", "c10d::all_reduce"})
        if (!by_kind.count(need)) {
          std::printf("   MISSING range %s\n", need);
          ok = false;
        }
      std::vector<std::pair<std::string, std::pair<double, int>>> top(ops.begin(), ops.end());
      std::sort(top.begin(), top.end(), [](const auto& x, const auto& y) { return x.second.first > y.second.first; });
      std::printf("   the ops with the most time (nested ops count in their callers too):\n");
      for (size_t i = 0; i < std::min<size_t>(6, top.size()); ++i)
        std::printf("   %-28s %9.2f ms  x%d\n", top[i].first.c_str(), top[i].second.first / 1e3, top[i].second.second);
      std::printf("   Ranges overlap: an all-gather issued for the next unit runs while this unit computes, so\n"
                  "   the shares add up to more than the step where titan overlaps communication.\n\n");

      if (step && !trace_svg.empty()) {
        std::ofstream(trace_svg) << profiling::render_svg(
            step_timeline(events, *step),
            strprintf("rank 0, step %lld of FSDP on %d ranks (dim %lld, %lld layers): the trace's ranges",
                      static_cast<long long>(steps), n, static_cast<long long>(dim), static_cast<long long>(layers)));
        std::printf("   drawn: %s\n\n", trace_svg.c_str());
      }

      // ------------------------------------------------ (3) memory
      std::ifstream in(dump + "/memory_snapshot" + it + "/rank0_memory_timeline.json");
      const nlohmann::json marks = nlohmann::json::parse(in);
      std::printf("3. rank 0's tensor memory at the step's boundaries (MiB; peak = the most inside the phase)\n");
      std::printf("   %-20s %10s %10s %10s %10s %10s %10s\n", "after", "params", "grads", "optim", "gathered", "other",
                  "peak");
      for (const auto& m : marks)
        std::printf("   %-20s %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n", m.at("phase").get<std::string>().c_str(),
                    m.at("parameters").get<double>() / 1048576, m.at("gradients").get<double>() / 1048576,
                    m.at("optimizer_state").get<double>() / 1048576, m.at("fsdp_gathered").get<double>() / 1048576,
                    m.at("other").get<double>() / 1048576, m.at("peak_in_phase").get<double>() / 1048576);
      std::printf("   Parameters, gradients and Adam's two moments are this rank's 1/%d shards; the activations of\n"
                  "   forward + backward show as the phase's peak above what is left at its end.\n\n", n);
    }
    at::Tensor flag = at::full({1}, ok ? 0.0 : 1.0, at::kDouble);
    group.all_reduce(flag, dist::ReduceOp::Max);
    ok = flag.item<double>() == 0;
    if (rank == 0) std::printf("%s\n", ok ? "OK: every file and range is there" : "FAIL: a file or range is missing");
    group.barrier();
    // The files are the lesson's material: --keep leaves them for Perfetto,
    // a browser and TensorBoard; otherwise the run cleans up after itself.
    if (rank == 0) {
      if (keep) std::printf("kept: %s\n", dump.c_str());
      else files::remove_all(dump), std::printf("removed %s (run with --keep to open the files above)\n", dump.c_str());
    }
    return ok ? 0 : 1;
  });
}
