// Lab 05: 1F1B's order for one rank. See labs/05_pipeline_parallel/README.md.
//
// What is here runs, but it is GPipe: every forward, then every backward.
// It is complete and has the same bubble as 1F1B, but rank r holds all
// `microbatches` micro-batches' activations at once; 1F1B holds at most
// pp − r. Rewrite the order.
#include "one_f_one_b.hpp"

namespace lab05 {

using titan::pp::Action;
using titan::pp::ActionType;
using titan::pp::RankActions;

RankActions one_f_one_b_order(int rank, int pp, int microbatches) {
  (void)pp;
  RankActions order;
  auto forward = [&](int mb) { order.push_back(Action{ActionType::Forward, rank, mb}); };
  auto backward = [&](int mb) { order.push_back(Action{ActionType::Backward, rank, mb}); };
  // TODO(lab): warm-up: pp − 1 − rank forwards (micro-batches 0, 1, ...).
  // TODO(lab): steady state: one forward (the next micro-batch), then one
  //            backward (the oldest micro-batch still held), until the
  //            forwards run out.
  // TODO(lab): drain: the remaining backwards, oldest first.
  // (GPipe, to be replaced:)
  for (int i = 0; i < microbatches; ++i) forward(i);
  for (int i = microbatches - 1; i >= 0; --i) backward(i);
  return order;
}

}  // namespace lab05
