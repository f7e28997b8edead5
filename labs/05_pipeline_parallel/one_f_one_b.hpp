#pragma once
/// @file
/// @brief Lab 05: the 1F1B (PipeDream-Flush) action order of one pipeline
/// rank, written by hand. The checker simulates it (titan::pp::simulate),
/// checks its memory bound and bubble, and trains a tiny Llama 3 with it
/// through titan's pipeline runtime.

#include "titan/parallel/pipeline/schedule.hpp"

namespace lab05 {

/// @brief Rank `rank`'s compute actions for one training step of a 1F1B
/// pipeline of `pp` ranks (one stage per rank: rank r runs stage r) over
/// `microbatches` micro-batches (>= pp): only Forward and Backward actions,
/// {type, stage, microbatch}, in the order the rank runs them. Communication
/// is added by the runtime (titan::pp::add_communication).
titan::pp::RankActions one_f_one_b_order(int rank, int pp, int microbatches);

}  // namespace lab05
