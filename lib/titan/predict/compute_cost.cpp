#include "titan/predict/compute_cost.hpp"

#include <algorithm>

#include "titan/models/llama3/job_layout.hpp"
#include "titan/parallel/mixed_precision.hpp"

namespace titan::predict {
namespace {

// The bytes each memory-bound kernel moves per element it touches, in
// units of the compute dtype's size e (forward, backward). Fused: titan's
// SwiGLU and RoPE kernels read their inputs and write their outputs once;
// op by op they are ATen's chains (silu, then mul; RoPE's complex views,
// casts and product), each op a pass. RMSNorm runs as ATen's on GPUs
// either way. The loss reads the logits once forward and once backward
// (writing their gradient) fused; op by op ATen's log-softmax and its
// backward pass over them more often. Checked on one H200 against the
// trace of the 8B-shaped step (docs/predict.md).
struct PassBytes {
  double forward, backward;
};
constexpr PassBytes kNorm{3, 6};
constexpr PassBytes kResidualAdd{3, 3};
constexpr PassBytes kRopeFused{2, 4}, kRopeOpByOp{12, 24};
constexpr PassBytes kSwigluFused{3, 5}, kSwigluOpByOp{6, 14};
constexpr PassBytes kLossFused{1, 2}, kLossOpByOp{5, 5};
// float8 linears: each GEMM's input cast to float8 forward (read e, write
// 1 byte) and its output gradient backward, per element, in units of e.
constexpr PassBytes kFloat8Cast{1.5, 1.5};

// The seconds of one GEMM [m, k] x [k, n]: as timed on this machine (the
// cpu preset), else the larger of its FLOPs at the matmul rate and its
// operands' bytes at the memory rate (a skinny GEMM is memory-bound).
double gemm_seconds(double m, double k, double n, double element_size, double peak, const Cluster& c) {
  if (c.measured_gemm && *c.measured_gemm) return (*c.measured_gemm)(m, k, n);
  const double flops = 2 * m * k * n;
  const double bytes = element_size * (m * k + k * n + m * n);
  return std::max(flops / (peak * c.matmul_efficiency), bytes / (c.hbm_bandwidth * c.memory_efficiency));
}

}  // namespace

double compute_element_size(const models::llama3::JobLayout& job) {
  const models::llama3::ParallelizeOptions& o = job.parallelize;
  if (job.dims.fsdp_enabled()) return static_cast<double>(c10::elementSize(o.fsdp.param_dtype));
  // Without FSDP one device and DDP autocast to the mixed-precision dtype
  // (parallel/mixed_precision.hpp); TP and PP alone compute in the stored one.
  const auto amp =
      parallel::autocast_dtype(job.dims, models::llama3::config_dtype_name(o.fsdp.param_dtype), job.device);
  return static_cast<double>(c10::elementSize(amp ? *amp : o.param_storage_dtype));
}

double gemm_peak(const models::llama3::JobLayout& job, const Cluster& cluster) {
  if (job.parallelize.float8.enable && !job.parallelize.float8.emulate) return cluster.peak_fp8;
  return compute_element_size(job) <= 2 ? cluster.peak_bf16 : cluster.peak_fp32;
}

ComputeCost microbatch_compute(const models::llama3::JobLayout& job, const Cluster& c, const ModelPart& part,
                               int64_t checkpointed_blocks) {
  const models::llama3::ModelArgs& a = job.args;
  const models::llama3::ParallelizeOptions& o = job.parallelize;
  const double tp = static_cast<double>(job.dims.tp), cp = static_cast<double>(job.dims.cp);
  const double e = compute_element_size(job);
  const double seq = static_cast<double>(o.seq_len);
  const double t = static_cast<double>(job.microbatch_sequences()) * seq / cp;  // this rank's tokens
  const bool sp = job.dims.tp_enabled() && o.tp.sequence_parallel;
  const double t_norm = sp ? t / tp : t;  // the residual stream's tokens on this rank
  const double D = static_cast<double>(a.dim);
  const double q = static_cast<double>(a.n_heads * a.head_dim()) / tp;
  const double kv = static_cast<double>(a.kv_heads() * a.head_dim()) / tp;
  const double f = static_cast<double>(a.ffn_hidden_dim()) / tp;
  const double V = static_cast<double>(a.vocab_size) / tp;
  const bool fused = a.fused_kernels;
  const bool float8 = o.float8.enable;
  const double block_peak = gemm_peak(job, c);
  const double ends_peak = e <= 2 ? c.peak_bf16 : c.peak_fp32;  // the output and attention: never float8
  const double mem_rate = c.hbm_bandwidth * c.memory_efficiency;

  // One block's forward, by kind. Its GEMMs: wq, wk, wv, wo, w1, w3, w2.
  const double gemm_elem = float8 ? 1.0 : e;
  double block_gemm = gemm_seconds(t, D, q, gemm_elem, block_peak, c) + 2 * gemm_seconds(t, D, kv, gemm_elem, block_peak, c) +
                      gemm_seconds(t, q, D, gemm_elem, block_peak, c) + 2 * gemm_seconds(t, D, f, gemm_elem, block_peak, c) +
                      gemm_seconds(t, f, D, gemm_elem, block_peak, c);
  // Attention: QK^T and PV, 4·T·(H·Q) FLOPs per token over the whole
  // sequence (CP's shards attend to all of it), half of it under a causal
  // mask (document masks skip more; not modelled).
  const double attention_fwd = 4 * t * seq * q * 0.5 / (ends_peak * c.attention_efficiency);
  const PassBytes rope = fused ? kRopeFused : kRopeOpByOp;
  const PassBytes swiglu = fused ? kSwigluFused : kSwigluOpByOp;
  auto block_memory = [&](bool backward) {
    auto pick = [&](const PassBytes& p) { return backward ? p.backward : p.forward; };
    double bytes = e * (2 * pick(kNorm) * t_norm * D + 2 * pick(kResidualAdd) * t_norm * D +
                        pick(rope) * t * (q + kv) + pick(swiglu) * t * f);
    if (float8) bytes += e * pick(kFloat8Cast) * t * (backward ? (q + 2 * kv + 2 * D + 2 * f) : (5 * D + q + f));
    return bytes / mem_rate;
  };

  ComputeCost out;
  const double blocks = static_cast<double>(part.blocks);
  const double recomputed = static_cast<double>(checkpointed_blocks);
  auto add = [&](double& phase, double gemm, double attention, double memory) {
    phase += gemm + attention + memory;
    out.gemm += gemm, out.attention += attention, out.memory_bound += memory;
  };
  add(out.forward, blocks * block_gemm, blocks * attention_fwd, blocks * block_memory(false));
  add(out.backward, 2 * blocks * block_gemm, 2.5 * blocks * attention_fwd, blocks * block_memory(true));
  // Full AC runs a checkpointed block's forward again; per-op SAC keeps the
  // matmuls' outputs and recomputes the rest.
  const bool per_op = o.ac.policy.per_op();
  add(out.recompute, per_op ? 0 : recomputed * block_gemm, recomputed * attention_fwd, recomputed * block_memory(false));

  if (part.has_embedding) {
    // A lookup forward; backward scatters into a dense gradient of the
    // whole (vocabulary-sharded) table.
    add(out.forward, 0, 0, t_norm * D * 2 * e / mem_rate);
    add(out.backward, 0, 0, (4 * V * D + t * D * (e + 4)) / mem_rate);
  }
  if (part.has_output) {
    const double out_gemm = gemm_seconds(t, D, V, e, ends_peak, c);
    const PassBytes loss = fused ? kLossFused : kLossOpByOp;
    add(out.forward, out_gemm, 0, e * (kNorm.forward * t_norm * D + loss.forward * t * V) / mem_rate);
    add(out.backward, 2 * out_gemm, 0, e * (kNorm.backward * t_norm * D + loss.backward * t * V) / mem_rate);
  }

  // The weights' own traffic per micro-batch, per local element: autocast
  // casts fp32 weights to the compute dtype forward (read 4, write e) and
  // the gradients back and into .grad backward; FSDP copies the gathered
  // weights out of the gather buffer and the gradients into the
  // reduce-scatter's (in its reduce dtype); fp32 accumulates into .grad.
  const double local_params = blocks * (D * (q + 2 * kv) + q * D + 3 * D * f + 2 * D) +
                              (part.has_embedding ? V * D : 0) + (part.has_output ? V * D + D : 0);
  const double stored = static_cast<double>(c10::elementSize(o.param_storage_dtype));
  double weight_fwd = 0, weight_bwd = stored * 2;
  if (job.dims.fsdp_enabled()) {
    const double reduce = static_cast<double>(c10::elementSize(o.fsdp.reduce_dtype));
    weight_fwd = 2 * e, weight_bwd = e + reduce;
  } else if (e < stored) {
    weight_fwd = stored + e, weight_bwd = e + 2 * stored;
  }
  add(out.forward, 0, 0, local_params * weight_fwd / mem_rate);
  add(out.backward, 0, 0, local_params * weight_bwd / mem_rate);
  return out;
}

double optimizer_seconds(int64_t parameter_elements, const Cluster& cluster) {
  constexpr double kBytesPerParameter = 40;
  return static_cast<double>(parameter_elements) * kBytesPerParameter /
         (cluster.hbm_bandwidth * cluster.memory_efficiency);
}

}  // namespace titan::predict
