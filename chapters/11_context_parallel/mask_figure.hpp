#pragma once
// The chapter's figures, both exact (counted, not measured), so they are
// the same on every machine:
//  - the causal attention matrix of one sequence cut into 2·cp chunks,
//    each query chunk's row coloured by the rank that holds it, under the
//    contiguous and the head-tail split, with each rank's share of the work;
//  - the ring: which rank's K/V each rank holds at each step, and how much
//    of that block the causal mask leaves to compute.
#include <string>

#include "titan/parallel/context_parallel/sharding.hpp"

namespace ch11 {

/// Both splits of a sequence of `seq` tokens over `cp` ranks side by
/// side, as a self-contained SVG.
std::string causal_split_svg(int64_t cp, int64_t seq);

/// The ring of `cp` ranks as a self-contained SVG, the contiguous and the
/// head-tail split side by side: a grid of ranks (rows) by ring steps
/// (columns); the cell of rank r at step t holds the K/V of rank
/// (r − t) mod cp, coloured by that rank, filled as far as the causal mask
/// leaves work (1 = the whole block, 0 = skipped).
std::string ring_svg(int64_t cp);

/// The share of a ring block's query-key pairs the causal mask leaves:
/// queries of `q_rank`, keys of `k_rank`, both cut by `layout`.
double block_work(const titan::cp::SequenceLayout& layout, int64_t q_rank, int64_t k_rank);

/// A rank's share of the causal attention work (unmasked query-key pairs)
/// of a sequence cut into layout.num_chunks() chunks of `chunk` tokens.
double causal_work(const titan::cp::SequenceLayout& layout, int64_t rank, int64_t chunk);

}  // namespace ch11
