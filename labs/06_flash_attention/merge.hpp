#pragma once
/// @file
/// @brief Lab 06: the online-softmax merge — two partial attention results,
/// each over its own part of the keys, into the result over all of them.
/// It is the step flash attention takes for every key/value tile (chapter
/// 06) and ring attention for every chunk that arrives (chapter 11).

#include <ATen/ATen.h>

namespace lab06 {

/// @brief Attention of some queries over one part of the keys:
/// out = softmax(S_part) V_part (normalised within the part) and, per
/// query row, lse = log Σ_{j in part} exp(S_ij) — −inf when the part holds
/// no key the row may see (all masked), with out = 0 there.
struct Partial {
  at::Tensor out;  ///< [B, H, S, D], fp32
  at::Tensor lse;  ///< [B, H, S], fp32
};

/// @brief The attention over both parts' keys together, from the two
/// partial results alone (no scores, no K or V).
Partial merge(const Partial& a, const Partial& b);

}  // namespace lab06
