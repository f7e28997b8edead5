#include "titan/parallel/pipeline/simulate.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <tuple>

#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::pp {
namespace {

using Key = std::tuple<int, int, int>;  // (type, stage, micro-batch)

Key key(ActionType t, int s, int i) { return {static_cast<int>(t), s, i}; }

double cost_of(const Action& a, const ActionCosts& c) {
  switch (a.type) {
    case ActionType::Forward: return c.forward;
    case ActionType::Backward: return c.backward;
    case ActionType::BackwardInput: return c.backward_input;
    case ActionType::BackwardWeight: return c.backward_weight;
    default: return 0;
  }
}

// One message between two ranks: (backward, the stage that receives it,
// micro-batch), spelled as the receiving action ("1RECV_F0").
using Message = std::tuple<bool, int, int>;

std::string message_str(const Message& m) {
  const auto [backward, stage, mb] = m;
  return Action{backward ? ActionType::RecvBackward : ActionType::RecvForward, stage, mb}.str();
}

// NCCL matches a rank pair's point-to-point messages in the order each side
// posts them (Gloo matches tags, so a Gloo run cannot show a mismatch):
// every rank's sends to a peer must be in the order the peer receives them,
// else same-shaped activations or gradients land in the wrong buffers.
// add_communication builds the lists so; this checks that it did.
void check_message_order(const ScheduleSpec& spec, const std::vector<RankActions>& with_comm) {
  const int p = spec.pp;
  std::map<std::pair<int, int>, std::vector<Message>> sent, received;  // (from, to) -> messages in order
  for (int r = 0; r < p; ++r)
    for (const Action& a : with_comm[static_cast<size_t>(r)]) {
      const int s = a.stage, i = a.microbatch;
      switch (a.type) {
        case ActionType::SendForward: sent[{r, spec.rank_of_stage(s + 1)}].push_back({false, s + 1, i}); break;
        case ActionType::SendBackward: sent[{r, spec.rank_of_stage(s - 1)}].push_back({true, s - 1, i}); break;
        case ActionType::RecvForward: received[{spec.rank_of_stage(s - 1), r}].push_back({false, s, i}); break;
        case ActionType::RecvBackward: received[{spec.rank_of_stage(s + 1), r}].push_back({true, s, i}); break;
        default: break;
      }
    }
  for (const auto& [pair, out] : sent) {
    const std::vector<Message>& in = received[pair];
    TITAN_INTERNAL_ASSERT(out.size() == in.size(), "pipeline: rank ", pair.first, " sends ", out.size(),
                          " messages to rank ", pair.second, ", which receives ", in.size());
    for (size_t k = 0; k < out.size(); ++k)
      TITAN_INTERNAL_ASSERT(out[k] == in[k], "pipeline schedule: rank ", pair.first, "'s message ", k + 1,
                            " to rank ", pair.second, " is ", message_str(out[k]), " but rank ", pair.second,
                            " receives ", message_str(in[k]), " there (add_communication must post receives in "
                            "the sender's order)");
  }
}

}  // namespace

double SimulatedRun::mean_bubble() const {
  if (bubble.empty()) return 0;
  return std::accumulate(bubble.begin(), bubble.end(), 0.0) / static_cast<double>(bubble.size());
}

SimulatedRun simulate(const ScheduleSpec& spec, const std::vector<RankActions>& all, const ActionCosts& costs) {
  spec.validate();
  const int p = spec.pp, S = spec.num_stages(), m = spec.microbatches;
  TITAN_CHECK(static_cast<int>(all.size()) == p, "schedule has ", all.size(), " ranks' lists for ", p, " ranks");
  std::vector<RankActions> lists(p);
  std::map<Key, int> count;
  for (int r = 0; r < p; ++r)
    for (const Action& a : all[r]) {
      if (!a.is_compute()) continue;
      TITAN_CHECK(a.stage >= 0 && a.stage < S && a.microbatch >= 0 && a.microbatch < m, "rank ", r, ": action ",
                  a.str(), " names a stage or micro-batch outside ", S, " stages x ", m, " micro-batches");
      TITAN_CHECK(spec.rank_of_stage(a.stage) == r, "rank ", r, ": action ", a.str(), " belongs to stage ", a.stage,
                  ", which runs on rank ", spec.rank_of_stage(a.stage));
      ++count[key(a.type, a.stage, a.microbatch)];
      lists[r].push_back(a);
    }
  const bool split = splits_backward(spec.kind);
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < m; ++i) {
      auto n = [&](ActionType t) { auto it = count.find(key(t, s, i)); return it == count.end() ? 0 : it->second; };
      const std::string where = "stage " + std::to_string(s) + " micro-batch " + std::to_string(i);
      TITAN_CHECK(n(ActionType::Forward) == 1, "schedule runs the forward of ", where, " ", n(ActionType::Forward),
                  " times (must be once)");
      const int whole = n(ActionType::Backward), in = n(ActionType::BackwardInput), w = n(ActionType::BackwardWeight);
      TITAN_CHECK((whole == 1 && in == 0 && w == 0) || (split && whole == 0 && in == 1 && w == 1), "schedule runs ",
                  whole, " B, ", in, " I and ", w, " W for ", where,
                  split ? " (must be one B, or one I and one W)" : " (must be one B)");
    }

  SimulatedRun run;
  run.start.assign(p, {});
  run.end.assign(p, {});
  run.busy.assign(p, 0);
  run.peak_in_flight.assign(p, 0);
  std::map<Key, double> done;  // end time of each finished action
  auto finished = [&](ActionType t, int s, int i, double* when) {
    auto it = done.find(key(t, s, i));
    if (it == done.end()) return false;
    *when = std::max(*when, it->second);
    return true;
  };
  // The gradient of stage s's input exists once its B or its I ran.
  auto input_grad = [&](int s, int i, double* when) {
    return finished(ActionType::Backward, s, i, when) || finished(ActionType::BackwardInput, s, i, when);
  };
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  std::vector<int> in_flight(p, 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < lists[r].size()) {
        const Action& a = lists[r][next[r]];
        double ready = free_at[r];
        bool ok = true;
        switch (a.type) {
          case ActionType::Forward:
            ok = a.stage == 0 || finished(ActionType::Forward, a.stage - 1, a.microbatch, &ready);
            break;
          case ActionType::Backward:
          case ActionType::BackwardInput:
            ok = finished(ActionType::Forward, a.stage, a.microbatch, &ready) &&
                 (a.stage == S - 1 || input_grad(a.stage + 1, a.microbatch, &ready));
            break;
          case ActionType::BackwardWeight:
            ok = finished(ActionType::BackwardInput, a.stage, a.microbatch, &ready);
            break;
          default: break;
        }
        if (!ok) break;
        const double end = ready + cost_of(a, costs);
        run.start[r].push_back(ready);
        run.end[r].push_back(end);
        run.busy[r] += end - ready;
        free_at[r] = end;
        done[key(a.type, a.stage, a.microbatch)] = end;
        // Activations of a micro-batch are held on the rank from its first
        // forward here to its last backward here (B or W of the first local stage).
        const int first = spec.stages_of_rank(r).front();
        if (a.type == ActionType::Forward && a.stage == first) run.peak_in_flight[r] = std::max(run.peak_in_flight[r], ++in_flight[r]);
        if ((a.type == ActionType::Backward || a.type == ActionType::BackwardWeight) && a.stage == first) --in_flight[r];
        ++next[r];
        progress = true;
      }
    }
  }
  std::string blocked;
  for (int r = 0; r < p; ++r)
    if (next[r] < lists[r].size()) blocked += (blocked.empty() ? "" : ", ") + ("rank " + std::to_string(r) + " at " + lists[r][next[r]].str());
  TITAN_CHECK(blocked.empty(), "pipeline schedule deadlocks: ", blocked, " wait for each other");
  check_message_order(spec, add_communication(spec, lists));
  for (int r = 0; r < p; ++r) run.makespan = std::max(run.makespan, free_at[r]);
  for (int r = 0; r < p; ++r) run.bubble.push_back(run.makespan > 0 ? 1.0 - run.busy[r] / run.makespan : 0.0);
  return run;
}

}  // namespace titan::pp
