// Lab 05 solution: 1F1B's order for one rank.
//
// Rank r (stage r) first runs pp − 1 − r forwards with no backward between
// them (warm-up): that is how many micro-batches are still on their way
// down the stages after it when its first forward finishes, so the first
// gradient can only come back after them. From then on it runs one forward
// and one backward in turn (steady state): every backward frees one
// micro-batch's activations just as the next forward stores one, so the
// rank never holds more than pp − r. The last pp − 1 − r backwards run
// with no forward left (drain). The last stage (r = pp − 1) has no warm-up:
// F0 B0 F1 B1 ...
#include "one_f_one_b.hpp"

#include <algorithm>

namespace lab05 {

using titan::pp::Action;
using titan::pp::ActionType;
using titan::pp::RankActions;

RankActions one_f_one_b_order(int rank, int pp, int microbatches) {
  const int warmup = std::min(pp - 1 - rank, microbatches);
  RankActions order;
  auto forward = [&](int mb) { order.push_back(Action{ActionType::Forward, rank, mb}); };
  auto backward = [&](int mb) { order.push_back(Action{ActionType::Backward, rank, mb}); };
  for (int i = 0; i < warmup; ++i) forward(i);
  for (int i = 0; i < microbatches - warmup; ++i) {
    forward(warmup + i);  // the newest micro-batch in ...
    backward(i);          // ... and the oldest one out (backwards go in forward order)
  }
  for (int i = microbatches - warmup; i < microbatches; ++i) backward(i);
  return order;
}

}  // namespace lab05
