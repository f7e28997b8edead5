// `titan train`: trains a Llama 3 model as a JobConfig describes it
// (defaults < --job.config_file < --section.key overrides), on one rank or,
// with --nproc N or under torchrun/Slurm, on every rank of its layout; see
// lib/titan/train for the trainer and docs/train.md for the log.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.hpp"
#include "titan/config/config.hpp"
#include "titan/launch/program.hpp"
#include "titan/train/job_layout.hpp"
#include "titan/train/trainer.hpp"
#include "titan/util/error.hpp"

namespace titan::cli {

// `--nproc N`: the config is read and the layout worked out once, here in
// the launcher, before any rank starts; a bad one is one line (each rank
// would print the same line, and ranks that fail apart make the launcher
// name the first as the failure). The ranks check again (torchrun starts
// them without this launcher).
static void check_before_launch(int argc, char** argv, int nproc) {
  std::vector<std::string> own;
  const config::JobConfig cfg = config::parse_job_config(argc, argv, 2, &own);
  if (!own.empty()) return;  // --help, or an argument the ranks will refuse
  train::check_job_before_launch(cfg, nproc);
}

static int cmd_train(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    std::vector<std::string> own;
    config::JobConfig cfg = config::parse_job_config(argc, argv, 2, &own);
    for (const std::string& a : own) {
      if (a == "--help" || a == "-h") {
        std::printf(
            "usage: titan train [--job.config_file F] [--section.key value ...] [--nproc N]\n"
            "Trains the model the config describes; every option is listed by `titan config --markdown`.\n"
            "Example: titan train --job.config_file train_configs/debug_model.toml --training.steps 20\n"
            "--nproc N runs N local ranks (CPU processes over Gloo, or one per GPU over NCCL); under torchrun\n"
            "or srun each process is one rank.\n"
            "Ctrl-C stops after the current step and prints the summary (exit code 130).\n");
        return 0;
      }
      throw Error("titan train: unexpected argument '" + a + "' (options are --section.key value; see titan train --help)");
    }
    train::Trainer trainer(std::move(cfg));
    train::TrainSummary summary = trainer.train();
    // 128 + SIGINT, the shell's code for a run ended by Ctrl-C.
    return summary.interrupted ? 130 : 0;
  }, check_before_launch);
}

TITAN_COMMAND("train", cmd_train, "train a Llama 3 model from a TOML config, on one rank or N (--nproc N, torchrun, srun)");

}  // namespace titan::cli
