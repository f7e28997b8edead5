// What a run prints before its first step: the banner (model, device,
// data, layout, batch, optimizer, MFU peak, init) and, for an init-only
// run, every rank's memory during the sharded initialisation. Beside
// summary.cpp, which prints what the run did at its end.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "titan/dist/process_group.hpp"
#include "titan/dist/world.hpp"
#include "titan/metrics/format.hpp"
#include "titan/metrics/memory.hpp"
#include "titan/models/llama3/flops.hpp"
#include "titan/ops/gemm/cpu_matmul.hpp"
#ifdef TITAN_HAS_CUDA
#include "titan/ops/attention/flash_cuda.hpp"
#include "titan/ops/fused/fused_cuda.hpp"
#endif
#include "titan/parallel/pipeline/runtime.hpp"
#include "titan/train/trainer.hpp"
#include "titan/train/validator.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::train {

using metrics::human_bytes;
using titan::strprintf;

std::string Trainer::banner() const {
  const int64_t n_params = models::llama3::count_parameters(layout_.args);
  std::string s = strprintf("titan train: %s\n", cfg_.job.description.c_str());
  s += strprintf("  model     llama3 %s: %s parameters (dim %lld, %lld layers, %lld heads, vocab %lld)\n",
                 options_.model_args ? "(custom args)" : cfg_.model.flavor.c_str(),
                 metrics::with_thousands(static_cast<double>(n_params)).c_str(), static_cast<long long>(layout_.args.dim),
                 static_cast<long long>(layout_.args.n_layers), static_cast<long long>(layout_.args.n_heads),
                 static_cast<long long>(layout_.args.vocab_size));
  s += "  device    " + device_.str() + " (" + metrics::device_name(device_) + ")";
  if (device_.is_cpu())
    s += strprintf(", %d threads, fp32 Linear GEMMs by %s", at::get_num_threads(),
                   ops::describe_cpu_matmul(cfg_.model.cpu_matmul).c_str());
  if (device_.is_cuda() && cfg_.comm.ranks_per_device > 1)
    s += strprintf(", shared by up to %lld ranks ([comm] ranks_per_device)",
                   static_cast<long long>(cfg_.comm.ranks_per_device));
  if (device_.is_cuda() && mesh_ && dist::world().engine() == "gloo")
    s += "; collectives over Gloo ([comm] backend), send and recv staged through pinned host memory";
#ifdef TITAN_HAS_CUDA
  if (device_.is_cuda()) {
    // Where titan's CUDA kernels cannot run here, what runs instead and why.
    std::string kernels;
    const std::string fused = layout_.args.fused_kernels ? ops::fused_cuda::unavailable(device_.index()) : "";
    if (!fused.empty()) kernels += "titan's fused kernels step aside for ATen's ops: " + fused;
    const std::string flash = layout_.args.attn_type == "flash"
                                  ? ops::flash_cuda_unavailable(device_.index(), layout_.args.head_dim(), /*bf16=*/true)
                                  : "";
    if (!flash.empty()) kernels += (kernels.empty() ? "" : "; ") + std::string("flash attention runs as SDPA: ") + flash;
    if (!kernels.empty()) s += "\n            " + kernels;
  }
#endif
  s += "\n  tokenizer " + tokenizer_->describe() + "\n";
  if (!tokenizer_note_.empty()) s += "            " + tokenizer_note_ + "\n";
  s += "  data      " + loaders_.front()->dataset_path() + "\n";
  if (validator_) {
    const config::ValidationSection& v = cfg_.validation;
    s += strprintf("  validate  after step 1 and every %lld: %lld batch(es) of %lld x %lld tokens per data-parallel rank%s\n",
                   static_cast<long long>(v.freq), static_cast<long long>(validator_->batches()),
                   static_cast<long long>(v.local_batch_size), static_cast<long long>(v.seq_len),
                   v.steps == -1 ? " (one pass)" : "");
  }
  if (fake_run_) s += fake_rank_banner_line(fake_run_->rank, fake_run_->world_size);
  s += "  parallel  " + layout_.dims.describe() + (parallelized_.description.empty() ? "" : ": " + parallelized_.description);
  if (read_ranks_.size() > 1)
    s += strprintf("; one process reading %lld data-parallel ranks' batches", static_cast<long long>(read_ranks_.size()));
  if (autocast_) s += std::string("; forward and loss autocast to ") + c10::toString(*autocast_) + " (no FSDP)";
  if (layout_.parallelize.param_storage_dtype != at::kFloat)
    s += "; pure " + cfg_.training.dtype + ": weights, gradients and AdamW state in " + cfg_.training.dtype +
         ", no fp32 copy";
  s += "\n";
  s += strprintf("  batch     %lld x %lld tokens, %lld micro-batch(es) per step on %lld data-parallel rank(s) = %s tokens per step\n",
                 static_cast<long long>(layout_.batches.local_batch), static_cast<long long>(cfg_.training.seq_len),
                 static_cast<long long>(layout_.batches.accumulation_steps), static_cast<long long>(layout_.batches.dp_degree),
                 metrics::with_thousands(static_cast<double>(layout_.batches.global_batch * cfg_.training.seq_len)).c_str());
  if (parallelized_.pipeline)
    s += strprintf("            each cut into %d pipeline micro-batches of %lld sequence(s)\n",
                   parallelized_.pipeline->spec().microbatches,
                   static_cast<long long>(cfg_.experimental.pipeline_parallel_microbatch_size));
  const int64_t schedule_steps = scheduler_->schedule().total_steps();
  const std::string over = cfg_.lr_scheduler.total_steps > 0 && schedule_steps != cfg_.training.steps
                               ? strprintf(" (schedule over %lld steps)", static_cast<long long>(schedule_steps))
                               : std::string();
  s += strprintf("  optimizer %s%s lr %g, %lld warm-up steps, %s decay%s; %lld steps, seed %lld\n",
                 cfg_.optimizer.name.c_str(), step_in_backward_ ? " (step in backward)" : "", cfg_.optimizer.lr, static_cast<long long>(scheduler_->schedule().warmup_steps()),
                 cfg_.lr_scheduler.decay_type.c_str(), over.c_str(), static_cast<long long>(cfg_.training.steps),
                 static_cast<long long>(cfg_.training.seed));
  s += strprintf("  flops     %.3g per token; peak %.3f TFLOP/s (%s)\n", flops_per_token_, peak_.flops / 1e12,
                 peak_.source.c_str());
  const ShardedInitReport& i = init_report_;
  s += strprintf("  init      sharded, rank %d: %s of the model's %s of parameters (%.1f%%, largest piece %s), "
                 "tensor peak %s, %.2f s",
                 rank_, human_bytes(static_cast<double>(i.local_bytes)).c_str(),
                 human_bytes(static_cast<double>(i.model_bytes)).c_str(),
                 i.model_bytes > 0 ? 100.0 * static_cast<double>(i.local_bytes) / static_cast<double>(i.model_bytes) : 0.0,
                 human_bytes(static_cast<double>(i.largest_piece_bytes)).c_str(),
                 human_bytes(static_cast<double>(init_peak_bytes_)).c_str(), i.seconds);
  return s;
}

std::string Trainer::init_memory_table() {
  // [local bytes, init peak, largest piece] of every rank, gathered.
  at::Tensor mine = at::tensor({static_cast<double>(init_report_.local_bytes), static_cast<double>(init_peak_bytes_),
                                static_cast<double>(init_report_.largest_piece_bytes),
                                static_cast<double>(load_peak_bytes_)},
                               at::TensorOptions().dtype(at::kDouble))
                        .reshape({1, 4});
  at::Tensor all = mine;
  // A fake rank has only its own row (a gather would repeat it).
  if (mesh_ && !fake_run_) all = dist::world().group()->all_gather(mine.to(device_), 0).cpu();
  const int64_t first_rank = fake_run_ ? rank_ : 0;
  const double model = static_cast<double>(init_report_.model_bytes);
  // A loaded checkpoint (the weights came from it, not from the init):
  // what its reading held beyond the model, next to the init's.
  const bool loaded = load_peak_bytes_ >= 0;
  std::string out = strprintf("init-only run (training.steps = 0): the model's parameters are %s\n"
                              "  rank  parameters held   share   largest piece   tensor peak during init   peak / model%s\n",
                              human_bytes(model).c_str(), loaded ? "   tensor peak during load   load / model" : "");
  for (int64_t r = 0; r < all.size(0); ++r) {
    const double held = all[r][0].item<double>(), peak = all[r][1].item<double>(), piece = all[r][2].item<double>();
    out += strprintf("  %4lld  %15s  %6.2f%%  %14s  %24s  %12.4f", static_cast<long long>(first_rank + r),
                     human_bytes(held).c_str(), 100.0 * held / model, human_bytes(piece).c_str(),
                     human_bytes(peak).c_str(), peak / model);
    if (loaded) {
      const double load = all[r][3].item<double>();
      out += strprintf("  %24s  %12.4f", human_bytes(load).c_str(), load / model);
    }
    out += "\n";
  }
  return out;
}

}  // namespace titan::train
