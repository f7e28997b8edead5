// `titan predict`: the step time, tokens/s per GPU and MFU of a config's
// layout on a cluster ([cluster]), without running it (nothing is built
// but the layout; docs/predict.md).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "commands.hpp"
#include "planned_world.hpp"
#include "titan/config/config.hpp"
#include "titan/estimate/fit.hpp"
#include "titan/estimate/memory_estimate.hpp"
#include "titan/launch/program.hpp"
#include "titan/models/llama3/job_layout.hpp"
#include "titan/dist/world.hpp"
#include "titan/predict/cpu_calibration.hpp"
#include "titan/predict/layout_search.hpp"
#include "titan/predict/step_prediction.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::cli {

// `titan predict --calibrate`, on each of its two ranks: Gloo between
// them, then rank 0 alone measures the compute and writes the cache.
static int calibrate_this_machine() {
  const dist::World& world = dist::init_distributed({.device = "cpu"});
  predict::CpuCalibration gloo;
  predict::measure_gloo(world, gloo);
  world.group()->barrier();
  if (world.rank() == 0) {
    predict::CpuCalibration c = predict::measure_cpu_compute();
    c.gloo_bandwidth = gloo.gloo_bandwidth, c.gloo_latency = gloo.gloo_latency;
    predict::save_cpu_calibration(c);
    std::printf("calibrated: %s\nwritten to %s\n", predict::describe(c).c_str(), predict::cpu_calibration_path().c_str());
  }
  world.group()->barrier();
  return 0;
}

static int cmd_predict(int argc, char** argv) {
  if (const std::string joined = rename_nproc_for_planning(argc, argv, "predict"); !joined.empty()) {
    std::fprintf(stderr, "error: %s\n", joined.c_str());
    return 2;
  }
  // --calibrate measures this machine, Gloo between two ranks included:
  // it runs as two ranks of its own.
  std::vector<char*> args(argv, argv + argc);
  static char nproc[] = "--nproc", two[] = "2";
  const bool calibrate = std::any_of(args.begin() + 2, args.end(), [](const char* a) {
    return std::string(a) == "--calibrate";
  });
  if (calibrate && !std::getenv("TITAN_LAUNCHER")) args.insert(args.begin() + 2, {nproc, two});
  argc = static_cast<int>(args.size());
  args.push_back(nullptr);
  argv = args.data();
  return run_main(argc, argv, [](int argc, char** argv) {
    std::vector<std::string> own;
    // Planned for the cluster's GPUs, also on a laptop without one.
    config::JobConfig cfg = config::parse_job_config(argc, argv, 2, &own);
    // A GPU preset plans the job for its GPUs, also on a laptop without one;
    // the cpu preset for this machine's cores.
    const bool on_cpu = cfg.cluster.preset == "cpu";
    if (!on_cpu && cfg.training.device == "cpu")
      throw Error("titan predict: [training] device = \"cpu\" on the GPU preset [cluster] preset = \"" +
                  cfg.cluster.preset + "\": use --cluster.preset cpu for this machine");
    if (on_cpu && cfg.training.device == "cuda")
      throw Error("titan predict: [cluster] preset = \"cpu\" models CPU jobs, not [training] device = \"cuda\"");
    cfg.training.device = on_cpu ? "cpu" : "cuda";
    int64_t world = 1;
    bool search = false;
    if (const char* w = std::getenv("WORLD_SIZE")) world = parse_planned_world("predict", "WORLD_SIZE", w);
    for (size_t i = 0; i < own.size(); ++i) {
      const std::string& a = own[i];
      if (a == "--help" || a == "-h") {
        std::string presets;
        for (const std::string& n : predict::cluster_presets()) presets += (presets.empty() ? "" : ", ") + n;
        std::printf(
            "usage: titan predict [--job.config_file F] [--section.key value ...] [--nproc N] [--search | --calibrate]\n"
            "Predicts one training step of the job on N GPUs (default: WORLD_SIZE or 1) of the cluster [cluster]\n"
            "describes (presets: %s; each [cluster] key replaces one of its values): per pipeline rank the\n"
            "compute (forward, backward, recompute, optimizer), the communication per mesh dimension and how much\n"
            "of it is exposed, the pipeline bubble; then the step time, tokens/s per GPU, TFLOP/s per GPU and MFU.\n"
            "Nothing is run: the model's FLOPs and bytes, the collectives' bytes and the schedule are counted\n"
            "(docs/predict.md says how, and how close it came to measured runs).\n"
            "--search: the fastest layout of the job (its model, sequence and global batch) that fits on the N GPUs:\n"
            "TP within a node, PP and its schedule, CP for long sequences, FSDP or HSDP, AC, accumulation; with the\n"
            "runner-up and where it spends more.\n"
            "--calibrate: measure this machine (GEMM, copy, attention, Gloo between two ranks) for --cluster.preset cpu.\n",
            presets.c_str());
        return 0;
      }
      if ((a == kPlannedNproc || a == "--world_size") && i + 1 < own.size()) {
        world = parse_planned_world("predict", a, own[++i]);
      } else if (a == "--search") {
        search = true;
      } else if (a == "--calibrate") {
        return calibrate_this_machine();
      } else {
        throw Error("titan predict: unexpected argument '" + a + "' (see titan predict --help)");
      }
    }
    const predict::Cluster cluster = predict::cluster_of(cfg, world);
    if (search) {
      const predict::SearchResult r = predict::search_layouts(cfg, world, cluster);
      if (r.best.empty())
        throw Error(strprintf("titan predict --search: none of %lld layouts fits on %lld GPUs of %s (%lld over %.1f GiB "
                              "per GPU, %lld refused)",
                              static_cast<long long>(r.tried + r.refused), static_cast<long long>(world),
                              cluster.accelerator.c_str(), static_cast<long long>(r.over_memory),
                              cluster.hbm_capacity_gib, static_cast<long long>(r.refused)));
      std::fputs(predict::format_search(r).c_str(), stdout);
      return 0;
    }
    const models::llama3::JobLayout layout =
        models::llama3::plan_layout(cfg, world, on_cpu ? c10::Device(c10::kCPU) : c10::Device(c10::kCUDA));
    const predict::StepPrediction p = predict::predict_step(layout, cluster);
    if (!p.fits) {
      // Say so in one line, with the memory estimate's way out.
      const estimate::JobEstimate e = estimate::estimate_job(layout);
      const estimate::FitAdvice advice = estimate::fit_advice(cfg, world, e, cluster.hbm_capacity_gib);
      const std::string way_out =
          advice.found ? strprintf("titan estimate suggests %s on %lld GPUs (%.1f GiB)", advice.overrides.c_str(),
                                   static_cast<long long>(advice.world_size), advice.peak_gib)
                       : std::string("titan estimate found no layout that fits");
      throw Error(strprintf("titan predict: the layout does not fit: %.1f GiB per GPU estimated against %.1f GiB of "
                            "%s; %s",
                            advice.worst_peak_gib, cluster.hbm_capacity_gib, cluster.accelerator.c_str(),
                            way_out.c_str()));
    }
    std::fputs(predict::format_prediction(p).c_str(), stdout);
    return 0;
  });
}

TITAN_COMMAND("predict", cmd_predict,
              "predict the step time, tokens/s per GPU and MFU of a config's layout on a cluster ([cluster])");

}  // namespace titan::cli
