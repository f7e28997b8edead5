#pragma once
// The chapter's figure: the causal attention matrix of one sequence cut
// into 2·cp chunks, each query chunk's row coloured by the rank that holds
// it, under the contiguous and the head-tail split, with each rank's share
// of the work beside it. Exact (counted, not measured), so it is the same
// on every machine.
#include <string>

#include "titan/parallel/context_parallel/sharding.hpp"

namespace ch11 {

/// Both splits of a sequence of `seq` tokens over `cp` ranks side by
/// side, as a self-contained SVG.
std::string causal_split_svg(int64_t cp, int64_t seq);

/// A rank's share of the causal attention work (unmasked query-key pairs)
/// of a sequence cut into layout.num_chunks() chunks of `chunk` tokens.
double causal_work(const titan::cp::SequenceLayout& layout, int64_t rank, int64_t chunk);

}  // namespace ch11
