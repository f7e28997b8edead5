#pragma once
/// @file
/// @brief FLOPs counted from a profiler trace: each op's recorded input
/// shapes (Kineto's "Input Dims", recorded with report_input_shapes) give
/// its arithmetic — a count independent of any formula, for chapter 10 and
/// its lab.

#include <string>

namespace titan::profiling {

/// @brief What a trace's ops computed.
struct TraceFlops {
  double matmul = 0;     ///< aten::mm, addmm, bmm, titan::mm: 2·M·K·N each (bias adds not counted)
  int matmul_ops = 0;
  /// The CPU flash-attention kernels (forward and backward), as *model*
  /// FLOPs: forward 2 × 2·B·H·T·T·Q (QKᵀ and P·V, the full square),
  /// backward twice that. The kernels' own work differs (causal tiles
  /// skipped, QKᵀ recomputed in backward); MFU counts the model's.
  double attention = 0;
  int attention_ops = 0;
};

/// @brief Adds up the FLOPs of the ops in the Chrome trace at `path` whose
/// start lies in [from_us, to_us] (default: all). Throws titan::Error
/// naming the file if it cannot be read.
TraceFlops count_trace_flops(const std::string& path, double from_us = -1, double to_us = -1);

}  // namespace titan::profiling
