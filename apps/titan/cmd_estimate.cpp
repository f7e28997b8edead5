// `titan estimate`: what a job would need per rank — parameters,
// gradients, optimizer state, activations, FSDP's gathered weights, the
// peak — and its FLOPs per step, from the config alone (the model is built
// on the meta device; nothing is allocated or run).
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
#include "titan/util/error.hpp"

namespace titan::cli {

static double parse_gib(const std::string& value) {
  char* end = nullptr;
  const double g = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(g > 0))
    throw Error("titan estimate: --device_memory_gib wants a positive number of GiB, got '" + value + "'");
  return g;
}

static int cmd_estimate(int argc, char** argv) {
  if (const std::string joined = rename_nproc_for_planning(argc, argv, "estimate"); !joined.empty()) {
    std::fprintf(stderr, "error: %s\n", joined.c_str());
    return 2;
  }
  return run_main(argc, argv, [](int argc, char** argv) {
    std::vector<std::string> own;
    // A plan for GPUs, also on a laptop without one (an explicit cpu stays).
    config::JobConfig cfg = estimate::planned_for_gpus(config::parse_job_config(argc, argv, 2, &own));
    // The ranks: as `titan train --nproc N` would use, or torchrun's WORLD_SIZE.
    int64_t world = 1;
    double budget_gib = estimate::kDefaultDeviceMemoryGiB;
    if (const char* w = std::getenv("WORLD_SIZE")) world = parse_planned_world("estimate", "WORLD_SIZE", w);
    for (size_t i = 0; i < own.size(); ++i) {
      const std::string& a = own[i];
      if (a == "--help" || a == "-h") {
        std::printf(
            "usage: titan estimate [--job.config_file F] [--section.key value ...] [--nproc N] [--device_memory_gib G]\n"
            "Estimates per-rank memory (parameters, gradients, optimizer state, activations, FSDP's gathered\n"
            "weights, the peak) and FLOPs per step of the job on N ranks (default: WORLD_SIZE or 1), without\n"
            "running it: the model is built on the meta device, so any flavor (--model.flavor 405B) is free.\n"
            "The job is modelled as it runs on CUDA GPUs, also on a machine without one (--training.device cpu\n"
            "for a CPU job's numbers). Ranks whose peak is over G GiB (default 80, an H100's) are named, with a\n"
            "layout that fits.\n");
        return 0;
      }
      if ((a == kPlannedNproc || a == "--world_size") && i + 1 < own.size()) {
        world = parse_planned_world("estimate", a, own[++i]);
      } else if (a == "--device_memory_gib" && i + 1 < own.size()) {
        budget_gib = parse_gib(own[++i]);
      } else {
        throw Error("titan estimate: unexpected argument '" + a + "' (see titan estimate --help)");
      }
    }
    const estimate::JobEstimate e = estimate::estimate_job(cfg, world);
    std::fputs(estimate::format_estimate(e).c_str(), stdout);
    std::fputs(estimate::format_fit_advice(estimate::fit_advice(cfg, world, e, budget_gib), world).c_str(), stdout);
    return 0;
  });
}

TITAN_COMMAND("estimate", cmd_estimate,
              "estimate per-rank memory and FLOPs per step of a config without running it (meta device)");

}  // namespace titan::cli
