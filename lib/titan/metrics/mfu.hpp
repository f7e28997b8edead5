#pragma once
/// @file
/// @brief The arithmetic of throughput and Model FLOPs Utilization (MFU),
/// kept apart from the logging so that it can be checked by hand.
///
/// MFU (PaLM, Chowdhery et al. 2022, appendix B) = model FLOPs the run
/// achieves per second / the hardware's peak FLOPs per second. "Model
/// FLOPs" counts what the model needs (forward + backward = 3 × forward,
/// the 6N + 12·L·H·Q·T per token that models/llama3 computes), never
/// recomputation from activation checkpointing, so MFU compares setups.

#include <cstdint>

namespace titan::metrics {

/// @brief Tokens per second per rank, torchtitan's "tps": tokens processed
/// by the whole job in `seconds`, divided by `num_ranks`. (torchtitan
/// divides each data-parallel rank's tokens by the non-data-parallel degree
/// TP·PP·CP, which is the same number.)
double tokens_per_second_per_rank(double tokens, double seconds, int num_ranks);

/// @brief Achieved model FLOP/s of one rank: flops_per_token · tps.
double achieved_flops_per_rank(double flops_per_token, double tps_per_rank);

/// @brief MFU in percent: 100 · flops_per_token · tps / peak (all per rank).
double mfu_percent(double flops_per_token, double tps_per_rank, double peak_flops_per_rank);

/// @brief MFU in percent from job totals (the PaLM paper's definition):
/// 100 · flops_per_step / step_seconds / (num_devices · peak_per_device).
double mfu_percent_from_step(double flops_per_step, double step_seconds, int num_devices,
                             double peak_flops_per_device);

}  // namespace titan::metrics
