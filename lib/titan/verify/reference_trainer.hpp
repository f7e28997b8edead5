#pragma once
/// @file
/// @brief The trainer as the single-process reference of a data-parallel
/// job: what tests, `titan verify` and chapter 12 compare a parallel run
/// against, step by step.

#include <cstdint>

#include "titan/train/trainer.hpp"

namespace titan::verify {

/// @brief `base` made into the options of the single-process reference of
/// a job with `dp_ranks` data-parallel ranks: one process (whatever
/// launched it) that reads the batches of ranks 0 .. dp_ranks−1 and
/// accumulates all of them into each step, so that its losses, gradient
/// norms and weights are those the parallel run must reproduce. With 1 it
/// is the reference of a job whose only parallelism is TP, PP or CP: one
/// rank's batches, one process. The config given to the trainer must
/// resolve on one rank (its parallel degrees left at their defaults).
/// Throws titan::Error when dp_ranks < 1.
train::TrainerOptions single_process_reference(int64_t dp_ranks, train::TrainerOptions base = {});

}  // namespace titan::verify
