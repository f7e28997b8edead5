// Memory and time per training step of the real trainer (debugmodel by
// default) under DDP, FSDP or HSDP on N emulated ranks, with the
// communication each rank sent per step next to what the analytic formulas
// predict from the parameter bytes, tokens per second per rank, and (FSDP,
// HSDP) the communication exposed per step: the time rank 0 was blocked
// waiting for FSDP's collectives (its *_wait events), after the warm-up.
// One line per run (rank 0); run.sh runs N = 1, 2, 4 for each technique
// side by side and prints the ratios and the scaling efficiency.
//
//   bench_data_parallel --nproc 4 --mode fsdp [--steps 8] [--warmup 2] [--flavor debugmodel]
#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "titan/config/job_config.hpp"
#include "titan/dist/comm_log.hpp"
#include "titan/dist/launch_env.hpp"
#include "titan/launch/options.hpp"
#include "titan/launch/program.hpp"
#include "titan/metrics/memory.hpp"
#include "titan/parallel/fsdp/fully_shard.hpp"
#include "titan/train/trainer.hpp"
#include "titan/util/error.hpp"

namespace {

struct Args {
  std::string mode = "fsdp";
  std::string flavor = "debugmodel";
  int64_t steps = 8, warmup = 2, batch = 4, seq_len = 128;
};

Args parse(int argc, char** argv) {
  Args a;
  titan::OptionParser p("bench_data_parallel",
                        "memory, time and communication per step of the trainer under DDP, FSDP or HSDP");
  p.add("--mode", &a.mode, "technique", {"ddp", "fsdp", "hsdp"});
  p.add("--flavor", &a.flavor, "llama3 model flavor");
  p.add("--steps", &a.steps, "training steps, warm-up included");
  p.add("--warmup", &a.warmup, "steps left out of the median");
  p.add("--batch", &a.batch, "sequences per rank and step");
  p.add("--seq-len", &a.seq_len, "tokens per sequence");
  p.parse(argc, argv);
  TITAN_CHECK(a.steps > a.warmup && a.warmup >= 0, "--steps must exceed --warmup");
  return a;
}

int64_t bytes_of(const at::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

}  // namespace

int main(int argc, char** argv) {
  return titan::run_main(argc, argv, [](int argc, char** argv) {
    const Args a = parse(argc, argv);
    const titan::dist::LaunchEnv env = titan::dist::read_launch_env();
    const int n = env.world_size;

    titan::config::JobConfig cfg;
    cfg.job.dump_folder = "/tmp/titan_bench_data_parallel_rank" + std::to_string(env.rank);
    cfg.model.flavor = a.flavor;
    cfg.model.tokenizer_path = "";
    cfg.training.device = "auto";
    cfg.training.batch_size = a.batch;
    cfg.training.seq_len = a.seq_len;
    cfg.training.steps = a.steps;
    cfg.training.mixed_precision_param = "float32";
    cfg.lr_scheduler.warmup_steps = 1;
    cfg.metrics.log_freq = 1000;
    if (a.mode == "ddp") {
      cfg.training.data_parallel_replicate_degree = n;
      cfg.training.data_parallel_shard_degree = 1;
    } else if (a.mode == "hsdp") {
      TITAN_CHECK(n % 2 == 0, "--mode hsdp needs an even number of ranks (2 replicas), got ", n);
      cfg.training.data_parallel_replicate_degree = 2;
    }

    titan::train::TrainerOptions opts;
    opts.console = false;
    opts.handle_signals = false;
    opts.peak_flops = 0;
    std::vector<double> step_seconds;
    titan::train::Trainer* running = nullptr;
    opts.on_step = [&](const titan::train::StepResult& r) {
      step_seconds.push_back(r.step_seconds);
      // The exposed communication counts the timed steps only.
      if (r.step == a.warmup && running) titan::fsdp::clear_fsdp_events(*running->model());
    };
    titan::train::Trainer trainer(cfg, opts);
    running = &trainer;

    // What the optimizer holds on this rank: parameters (shards under FSDP),
    // their gradients (still there after the last step) and Adam state.
    int64_t param_bytes = 0;
    for (const at::Tensor& p : trainer.trained_parameters()) param_bytes += bytes_of(p);
    // Every rank's full-model bytes, for the analytic volumes: S.
    int64_t model_bytes = 0;
    for (const auto& [name, t] : trainer.full_state_dict()) model_bytes += bytes_of(t);

    auto& log = titan::dist::CommLog::instance();
    log.clear();  // construction's broadcast / gathers are not a step's
    trainer.train();
    int64_t grad_bytes = 0;
    for (const at::Tensor& p : trainer.trained_parameters()) grad_bytes += bytes_of(p.grad());
    int64_t optimizer_bytes = 0;
    for (const auto& [key, state] : trainer.optimizer().state())
      for (const at::Tensor& t : {static_cast<torch::optim::AdamWParamState&>(*state).exp_avg(),
                                  static_cast<torch::optim::AdamWParamState&>(*state).exp_avg_sq()})
        optimizer_bytes += bytes_of(t);

    // Measured: what this rank's collectives sent per step, summed over the
    // log (the steps are alike) and divided by the step count.
    double ag = 0, rs = 0, ar = 0;
    for (const titan::dist::CommRecord& r : log.records()) {
      if (r.op == titan::dist::CommOp::AllGather) ag += r.wire_bytes;
      if (r.op == titan::dist::CommOp::ReduceScatter) rs += r.wire_bytes;
      if (r.op == titan::dist::CommOp::AllReduce && r.payload_bytes > 64) ar += r.wire_bytes;  // not the loss/norm scalars
    }
    const double steps = static_cast<double>(a.steps);
    ag /= steps, rs /= steps, ar /= steps;

    // Analytic, from the model's bytes S alone:
    //   DDP  all-reduce of every gradient once: 2(n-1)/n * S
    //   FSDP all-gather S for forward and again for backward, except the
    //        units kept gathered (the root and, by torchtitan's default, the
    //        last block): (n-1)/n * (2S - kept); reduce-scatter (n-1)/n * S
    //   HSDP the same within a replica group of n/2, plus an all-reduce of
    //        the gradient shards across the 2 replicas: 2(2-1)/2 * S/(n/2)
    const auto& dims = trainer.parallel_dims();
    const double S = static_cast<double>(model_bytes);
    double kept = 0;
    {
      const auto blocks = trainer.model()->blocks();
      // named by the full state dict: everything outside layers.* is the root's
      const std::string last = "layers." + std::to_string(blocks.size() - 1) + ".";
      for (const auto& [name, t] : trainer.full_state_dict())
        if (name.rfind("layers.", 0) != 0 || name.rfind(last, 0) == 0) kept += static_cast<double>(bytes_of(t));
    }
    double ag_model = 0, rs_model = 0, ar_model = 0;
    const double s = static_cast<double>(dims.dp_shard), r = static_cast<double>(dims.dp_replicate);
    if (dims.fsdp_enabled()) {
      ag_model = (s - 1) / s * (2 * S - kept);
      rs_model = (s - 1) / s * S;
      if (r > 1) ar_model = 2 * (r - 1) / r * (S / s);
    } else if (dims.ddp_enabled()) {
      ar_model = 2 * (r - 1) / r * S;
    }

    // Exposed communication: rank 0's time blocked in FSDP's waits, per
    // timed step (no FSDP: none recorded, printed as 0).
    double exposed_us = 0;
    for (const titan::fsdp::FsdpEvent& e : titan::fsdp::fsdp_events(*trainer.model()))
      if (e.what.size() > 5 && e.what.compare(e.what.size() - 5, 5, "_wait") == 0) exposed_us += e.end_us - e.start_us;
    const double exposed_ms = exposed_us / 1e3 / static_cast<double>(a.steps - a.warmup);

    std::sort(step_seconds.begin() + a.warmup, step_seconds.end());
    const double median = step_seconds[a.warmup + (step_seconds.size() - a.warmup) / 2];
    const titan::metrics::MemoryStats mem = titan::metrics::memory_stats(trainer.device());
    std::string layout = dims.describe();
    for (size_t at = layout.find(" x "); at != std::string::npos; at = layout.find(" x ")) layout.replace(at, 3, "x");
    for (char& c : layout)
      if (c == ' ') c = '_';
    if (env.rank == 0) {
      const double MiB = 1024.0 * 1024.0;
      std::printf(
          "RESULT mode=%s ranks=%d layout=%s step_ms=%.1f params_MiB=%.3f grads_MiB=%.3f optim_MiB=%.3f peak_rss_MiB=%.0f "
          "ag_MiB=%.3f ag_model_MiB=%.3f rs_MiB=%.3f rs_model_MiB=%.3f ar_MiB=%.3f ar_model_MiB=%.3f "
          "tokens_per_s_per_rank=%.0f exposed_ms=%.1f\n",
          a.mode.c_str(), n, layout.c_str(), median * 1e3, param_bytes / MiB, grad_bytes / MiB,
          optimizer_bytes / MiB, mem.peak_bytes / MiB, ag / MiB, ag_model / MiB, rs / MiB, rs_model / MiB, ar / MiB,
          ar_model / MiB, static_cast<double>(a.batch * a.seq_len) / median, exposed_ms);
    }
    return 0;
  });
}
