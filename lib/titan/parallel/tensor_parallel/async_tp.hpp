#pragma once
/// @file
/// @brief Async tensor parallelism in eager mode: the all-gather before a
/// column-parallel matmul and the reduce-scatter after a row-parallel one
/// are cut into one chunk per rank and passed around a ring, so that chunk
/// k's transfer runs while chunk k−1's matmul computes.
///
/// torch does this with a compiler pass (torch.compile + symmetric memory:
/// "micro-pipeline TP"); titan does it with hooks, and the same ring on
/// Gloo (async send/recv on CPU) and NCCL.
///
///     all-gather → matmul (wq, wk, wv together; w1, w3 together), rank r:
///       step k: send my current chunk right, receive the next from the left,
///               and meanwhile Y[chunk (r−k) mod n] = chunk · Wᵀ (every W)
///     matmul → reduce-scatter (wo, w2), rank r:
///       step k: receive the running sum of chunk (r−1−k) mod n from the left
///               while computing my partial of it; add; send it right
///
/// Backward swaps the two: the input gradient of all-gather → matmul is a
/// matmul → reduce-scatter, and that of matmul → reduce-scatter an
/// all-gather → matmul. Weight gradients use the gathered tensors.
/// Results equal synchronous TP up to summation order.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace torch::nn {
class Module;
}
namespace titan::dist {
class ProcessGroup;
}
namespace titan::float8 {
struct Scaled;
}

namespace titan::tp {

/// @brief x_shard [b, s/n, d] is this rank's sequence chunk. Returns the
/// gathered input [b, s, d] (no gradient) followed by x_full · Wᵢᵀ for every
/// weight Wᵢ [oᵢ, d]. Differentiable in x_shard and every Wᵢ. `kept`:
/// the outputs per-op activation checkpointing kept from the first pass
/// (one per weight); the ring then only gathers and returns them, with the
/// same backward.
std::vector<at::Tensor> all_gather_matmul(const at::Tensor& x_shard, const std::vector<at::Tensor>& weights,
                                          const dist::ProcessGroup& group, const std::string& label = "",
                                          const std::vector<at::Tensor>* kept = nullptr);

/// @brief a [b, s, k] (whole sequence, this rank's input features) times
/// Wᵀ (W [o, k], this rank's columns), summed over ranks and scattered on
/// the sequence: this rank's [b, s/n, o]. Differentiable in a and W.
/// `kept`: that output kept by per-op activation checkpointing, returned
/// without the ring (no GEMM, no transfer), with the same backward.
at::Tensor matmul_reduce_scatter(const at::Tensor& a, const at::Tensor& weight, const dist::ProcessGroup& group,
                                 const std::string& label = "", const at::Tensor* kept = nullptr);

/// @brief all_gather_matmul for float8 Linears (tensorwise scaling, as
/// float8::float8_linear): x is cast to e4m3 once with the amax of the
/// whole input (over `amax_group`), travels round the ring in float8, and
/// each chunk's GEMM is a scaled_mm with the weights' e4m3 casts
/// `weights_f8` (float8::float8_operands); backward casts the output
/// gradients to e5m2 the same way. The gradients go to `weights`. The
/// gathered input returned first holds the float8 values. Equal to
/// synchronous float8 TP up to the ring's summation order. `kept` as
/// all_gather_matmul's (the ring gathers x's float8 cast, no GEMM).
std::vector<at::Tensor> float8_all_gather_matmul(const at::Tensor& x_shard, const std::vector<at::Tensor>& weights,
                                                 const std::vector<float8::Scaled>& weights_f8,
                                                 const dist::ProcessGroup* amax_group,
                                                 const dist::ProcessGroup& group, const std::string& label = "",
                                                 const std::vector<at::Tensor>* kept = nullptr);

/// @brief matmul_reduce_scatter for a float8 Linear: a and the weight in
/// e4m3 (the weight's cast given, a's with the amax over `amax_group`),
/// each chunk's partial a scaled_mm; backward passes the e5m2 output
/// gradient round the ring. `kept` as matmul_reduce_scatter's (only a's
/// float8 cast is made again).
at::Tensor float8_matmul_reduce_scatter(const at::Tensor& a, const at::Tensor& weight, const float8::Scaled& weight_f8,
                                        const dist::ProcessGroup* amax_group, const dist::ProcessGroup& group,
                                        const std::string& label = "", const at::Tensor* kept = nullptr);

/// @brief Switches a module parallelised with sequence parallelism to the
/// overlapped algorithms: every PrepareModuleInput(Shard(1) → Replicate)
/// whose children are Colwise Linears becomes one all_gather_matmul for all
/// of them, and every Rowwise Linear with output Shard(1) a
/// matmul_reduce_scatter. Linears that float8::convert_to_float8_training
/// converts (before or after this call) run their float8 versions; the
/// Colwise Linears of one site must be all float8 or none. Returns the
/// number of sites switched; throws
/// titan::Error when there are none (without sequence parallelism there is
/// no all-gather or reduce-scatter next to a matmul to overlap).
int enable_async_tp(torch::nn::Module& module);

/// @brief One interval of the overlapped algorithms on this rank, for the
/// timeline: a chunk's matmul, or the wait for a chunk's transfer.
struct AsyncTpEvent {
  std::string label;  ///< e.g. "layers.0.attention ag+mm", "layers.0.attention.wo mm+rs"
  /// "matmul"; "wait" (blocked on the ring transfer); "transfer" (in
  /// flight, from issue to the end of its wait)
  std::string kind;
  int chunk = 0;      ///< the ring step
  double start_us = 0, end_us = 0;  ///< CommLog clock
};

/// @brief The events since the last clear, in time order.
std::vector<AsyncTpEvent> async_tp_events();
/// @brief Forgets the events.
void clear_async_tp_events();
/// @brief Microseconds this rank spent blocked on ring transfers since the
/// last clear: the exposed (un-overlapped) communication of async TP.
double async_tp_exposed_us();

}  // namespace titan::tp
