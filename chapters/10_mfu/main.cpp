// Chapter 10 — FLOPs and MFU.
//
// Model FLOPs Utilisation (PaLM, Chowdhery et al. 2022) is the share of the
// hardware's peak that the model's own arithmetic uses:
//
//   MFU = (model FLOPs per token × tokens per second) / peak FLOP/s
//
// "Model FLOPs" are what the model needs, not what the kernels happen to
// do: recomputation (activation checkpointing) and attention kernels that
// redo work in their backward do not raise MFU. torchtitan counts them
// analytically per token:
//
//   6 · (N − N_embedding)        every weight: a multiply-add per token in
//                                forward (2 FLOPs), two in backward (dX, dW)
//   + 12 · L · H · Q · T         attention's QKᵀ and scores·V, forward 2 × 2·T·H·Q,
//                                × 3 for forward + backward, the full T × T square
//
// This program checks the formula against the work really done: it records
// one training step with the profiler and counts, from the trace, the FLOPs
// of every matmul (2·M·K·N from each op's input shapes) and of the
// attention kernels — a count that does not use the formula — and then
// computes MFU from the measured step time and this machine's peak.
//
//   ./build/bin/ch10_mfu
//   ./build/bin/ch10_mfu --seq-len 512 --dim 512
//   ./build/bin/ch10_mfu --quick      # CTest
//   ./build/bin/ch10_mfu --nproc 2    # FSDP over 2 ranks: rank 0's step and memory
//
// Last, it checks `titan estimate`'s memory model (lib/titan/estimate) on
// the same step: the estimated peak against the peak the trainer's memory
// timeline recorded.
//
// Exit status 0 when the counted matmul FLOPs equal 6 · (N − N_embedding −
// N_norms) per token (the norm weights do no matmul), to 1e-9, and the
// estimated peak is within 10 % of the measured one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "titan/util/files.hpp"
#include "titan/dist/world.hpp"
#include "titan/estimate/memory_estimate.hpp"
#include "titan/launch/options.hpp"
#include "titan/launch/program.hpp"
#include "titan/metrics/format.hpp"
#include "titan/metrics/mfu.hpp"
#include "titan/models/llama3/flops.hpp"
#include "titan/profiling/trace_flops.hpp"
#include "titan/profiling/trace_reader.hpp"
#include "titan/train/trainer.hpp"
#include "titan/util/strprintf.hpp"

using namespace titan;
using titan::strprintf;

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    int64_t dim = 256, layers = 4, seq_len = 256, batch = 2;
    bool quick = false;
    OptionParser parser("ch10_mfu", "FLOPs per token two ways (formula, counted from a trace) and MFU");
    parser.add("--dim", &dim, "model width");
    parser.add("--layers", &layers, "transformer layers");
    parser.add("--seq-len", &seq_len, "tokens per sequence (T)");
    parser.add("--batch", &batch, "sequences per step");
    parser.flag("--quick", &quick, "small model (CTest)");
    parser.parse(argc, argv);
    if (quick) dim = 64, layers = 2, seq_len = 64;

    models::llama3::ModelArgs a = models::llama3::flavor_args("debugmodel");
    a.dim = dim, a.n_layers = layers;
    a.max_seq_len = seq_len;
    // With --nproc N the trainer runs FSDP over the N ranks; each computes
    // its own batch (the FLOPs per token do not change) and holds 1/N of the
    // weights and moments (the memory estimate must see N ranks too).
    const dist::World& world = dist::init_distributed({.device = "cpu"});
    const int rank = world.rank(), ranks = world.size();
    const std::string dump = files::temp_dir() + "/titan_ch10_np" + std::to_string(ranks);
    if (rank == 0) files::remove_all(dump);
    world.group()->barrier();
    config::JobConfig cfg;
    cfg.job.dump_folder = dump;
    cfg.training.device = "cpu";
    cfg.training.seq_len = seq_len;
    cfg.training.batch_size = batch;
    cfg.training.steps = 3;
    cfg.training.mixed_precision_param = "float32";  // one rank and N alike: fp32 weights
    cfg.metrics.log_freq = 3;
    cfg.profiling.enable_profiling = true;
    cfg.profiling.profile_freq = 3, cfg.profiling.profiler_warmup = 1, cfg.profiling.profiler_active = 1;
    cfg.profiling.enable_memory_snapshot = true;  // step 3's memory timeline, for part 4
    train::TrainerOptions o;
    o.model_args = a;
    o.console = false;
    o.handle_signals = false;
    train::Trainer trainer(cfg, o);
    const train::TrainSummary summary = trainer.train();
    // Rank 0 reads its trace and memory timeline and reports; the others are done.
    if (rank != 0) return 0;

    // ------------------------------------------------ (1) the formula
    const double n = static_cast<double>(models::llama3::count_parameters(trainer.model()->args()));
    const double n_emb = static_cast<double>(models::llama3::count_embedding_parameters(trainer.model()->args()));
    const double H = static_cast<double>(a.n_heads), Q = static_cast<double>(dim / a.n_heads);
    const double linear = 6 * (n - n_emb), attention = 12 * layers * H * Q * seq_len;
    const double per_token = models::llama3::flops_per_token(trainer.model()->args(), seq_len);
    if (ranks > 1)
      std::printf("%d ranks, FSDP: rank 0's step (its own %lld sequences) and memory (1/%d of the weights)\n\n",
                  ranks, static_cast<long long>(batch), ranks);
    std::printf("1. the formula, per token (N = %s parameters, of which embedding %s; T = %lld):\n",
                metrics::with_thousands(n).c_str(), metrics::with_thousands(n_emb).c_str(),
                static_cast<long long>(seq_len));
    std::printf("   6 · (N − N_embedding)   %14.4g\n   12 · L · H · Q · T      %14.4g\n   total                   %14.4g"
                "   (titan's flops_per_token: %.4g)\n\n",
                linear, attention, linear + attention, per_token);

    // ------------------------------------------------ (2) counted
    const std::string trace = dump + "/profile_traces/iteration_3/rank0_trace.json";
    const profiling::TraceFlops c = profiling::count_trace_flops(trace);
    const profiling::TraceEvent* step = profiling::find_event(profiling::read_trace_events(trace), "ProfilerStep#3");
    TITAN_CHECK(step != nullptr, "no ProfilerStep#3 in ", trace);
    const double tokens = static_cast<double>(batch * seq_len);
    const double mm_ratio = c.matmul / tokens / linear;
    // The formula's N includes the RMSNorm weights (D per norm, 2 per
    // layer + the final one), which multiply elementwise, not in a matmul.
    const double n_norm = static_cast<double>((2 * layers + 1) * dim);
    const double exact = c.matmul / tokens / (6 * (n - n_emb - n_norm));
    const double att_ratio = c.attention / tokens / attention;
    std::printf("2. counted from the trace of step 3 (%g tokens), from each op's input shapes:\n", tokens);
    std::printf("   %d matmuls (titan::mm or aten::mm, 2·M·K·N)   %14.4g per token = %.5f × 6·(N − N_embedding)\n",
                c.matmul_ops, c.matmul / tokens, mm_ratio);
    std::printf("   %*s = %.9f × 6·(N − N_embedding − N_norms): the %s norm weights are the difference\n",
                47, "", exact, metrics::with_thousands(n_norm).c_str());
    std::printf("   %d attention kernels (flash fwd + bwd)        %14.4g per token = %.5f × 12·L·H·Q·T\n",
                c.attention_ops, c.attention / tokens, att_ratio);
    std::printf("   The matmuls are the weights' work exactly: forward X·Wᵀ, backward dY·W and dYᵀ·X per\n"
                "   linear layer, the output projection included and the embedding (a lookup) not.\n"
                "   Attention is counted as model FLOPs (the kernel also recomputes QKᵀ in backward,\n"
                "   and skips part of the causal square: hardware work that MFU does not count).\n\n");

    // ------------------------------------------------ (3) MFU
    const double step_s = step->dur / 1e6;
    const double model_flops = per_token * tokens;
    std::printf("3. MFU of the recorded step: %.4g model FLOPs in %.1f ms = %.3g FLOP/s", model_flops,
                step_s * 1e3, model_flops / step_s);
    if (summary.peak_flops > 0)
      std::printf(", against a peak of %.3g FLOP/s (%s): MFU %.1f%%\n", summary.peak_flops, summary.peak_source.c_str(),
                  100 * model_flops / step_s / summary.peak_flops);
    else
      std::printf(" (no peak known)\n");
    std::printf("   The recorded step runs under the profiler (slower than the others); the trainer's log line\n"
                "   reports MFU from unprofiled steps: %.1f%% over steps 2-3 here.\n\n", summary.mfu_pct);

    // ------------------------------------------------ (4) memory: estimated vs measured
    // titan estimate's walk of the step (parameters, AdamW's moments, every
    // saved activation, the loss end) against what the counting allocator
    // saw: the largest peak of step 3's phases.
    auto mib = [](int64_t bytes) { return strprintf("%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0)); };
    const estimate::JobEstimate est = estimate::estimate_job(cfg, ranks, a);
    const estimate::RankMemory& r = est.worst();
    const std::string timeline = dump + "/memory_snapshot/iteration_3/rank0_memory_timeline.json";
    std::ifstream timeline_file(timeline);
    TITAN_CHECK(timeline_file.good(), "no memory timeline at ", timeline);
    const nlohmann::json marks = nlohmann::json::parse(timeline_file);
    int64_t measured = 0;
    for (const auto& m : marks) measured = std::max<int64_t>(measured, m.at("peak_in_phase").get<int64_t>());
    const double mem_ratio = static_cast<double>(r.peak) / static_cast<double>(measured);
    std::printf("4. memory of step 3, titan estimate against the counting allocator:\n");
    std::printf("   parameters %s + optimizer %s + activations %s + loss gradient %s = %s estimated (%s)\n",
                mib(r.parameters).c_str(), mib(r.optimizer_state).c_str(),
                mib(r.activations).c_str(), mib(r.transient).c_str(), mib(r.peak).c_str(),
                r.peak_phase.c_str());
    std::printf("   measured peak %s: estimate / measured = %.4f\n\n", mib(measured).c_str(), mem_ratio);

    const bool ok = std::abs(exact - 1) < 1e-9 && std::abs(mem_ratio - 1) <= 0.10;
    std::printf("%s\n", ok ? "OK: the counted matmul FLOPs equal 6 · (N − N_embedding − N_norms) per token, and the "
                             "memory estimate is within 10 % of the measured peak"
                           : "FAIL: the counted matmul FLOPs differ from the formula, or the memory estimate is off");
    files::remove_all(dump);
    return ok ? 0 : 1;
  });
}
