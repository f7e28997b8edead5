#include "titan/parallel/pipeline/simulate.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>

#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::pp {
namespace {

using Key = std::tuple<int, int, int>;  // (type, stage, micro-batch)

Key key(ActionType t, int s, int i) { return {static_cast<int>(t), s, i}; }

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

// NCCL runs a rank's point-to-point batches one after another on its
// communicator's stream, a batch ends when all its messages have, and a send
// larger than NCCL's buffers ends only once the peer has posted the matching
// receive (nccl.h: send and receive are "blocking for the GPU"). Gloo buffers
// sends, so a Gloo run cannot show a cycle of ranks each waiting in a batch
// for a receive its peer posts only after a batch of its own. This plays the
// lists as PipelineRuntime posts them (each maximal run of communication
// actions one batch, waited before the next compute action) with every send
// blocking until its receive is posted, and says where the ranks stop when
// they do not all get to the end. `forward_only` plays an eval step (forwards and their messages).
std::string blocking_send_deadlock(const ScheduleSpec& spec, const std::vector<RankActions>& with_comm,
                                  bool forward_only) {
  const int p = spec.pp;
  using Op = std::tuple<int, int, int, bool>;  // (from, to, k-th message of that pair, is the send)
  std::vector<std::vector<std::vector<Op>>> batches(p);  // [rank][batch] -> its messages
  std::vector<std::vector<std::string>> names(p);        // a batch's actions, for the message
  std::map<std::pair<int, int>, int> sent, received;     // messages of each pair so far
  for (int r = 0; r < p; ++r) {
    bool open = false;  // the last entry is a batch still taking actions
    for (const Action& a : with_comm[static_cast<size_t>(r)]) {
      const bool backward_msg = a.type == ActionType::SendBackward || a.type == ActionType::RecvBackward;
      if (a.is_compute()) {
        open = false;
        continue;  // compute never waits in this model: its receive came before it
      }
      if (forward_only && backward_msg) continue;
      int from = r, to = r;
      switch (a.type) {
        case ActionType::SendForward: to = spec.rank_of_stage(a.stage + 1); break;
        case ActionType::SendBackward: to = spec.rank_of_stage(a.stage - 1); break;
        case ActionType::RecvForward: from = spec.rank_of_stage(a.stage - 1); break;
        default: from = spec.rank_of_stage(a.stage + 1); break;  // RecvBackward
      }
      const bool is_send = from == r;
      const int k = (is_send ? sent : received)[{from, to}]++;
      if (!open) {
        batches[r].emplace_back();
        names[r].emplace_back();
        open = true;
      }
      batches[r].back().push_back({from, to, k, is_send});
      names[r].back() += (names[r].back().empty() ? "" : " ") + a.str();
    }
  }
  std::vector<size_t> at(p, 0);  // each rank's batch in flight
  std::set<Op> done;
  for (bool progress = true; progress;) {
    progress = false;
    std::set<Op> posted;
    for (int r = 0; r < p; ++r)
      if (at[r] < batches[r].size()) posted.insert(batches[r][at[r]].begin(), batches[r][at[r]].end());
    for (const Op& op : posted) {
      const auto [from, to, k, is_send] = op;
      if (posted.count({from, to, k, !is_send})) done.insert(op);  // both sides posted: the message goes
    }
    for (int r = 0; r < p; ++r) {
      if (at[r] >= batches[r].size()) continue;
      const auto& ops = batches[r][at[r]];
      if (std::all_of(ops.begin(), ops.end(), [&](const Op& op) { return done.count(op) > 0; })) {
        ++at[r];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < p; ++r)
    if (at[r] < batches[r].size())
      stuck += (stuck.empty() ? "" : ", ") + ("rank " + std::to_string(r) + " in [" + names[r][at[r]] + "]");
  return stuck;
}

namespace {

void check_blocking_sends(const ScheduleSpec& spec, const std::vector<RankActions>& with_comm, bool forward_only) {
  const std::string stuck = blocking_send_deadlock(spec, with_comm, forward_only);
  TITAN_INTERNAL_ASSERT(stuck.empty(), "pipeline schedule: with sends that wait for their receive (NCCL, messages "
                        "over its buffer size)", forward_only ? ", forward only" : "", " the ranks wait for each "
                        "other: ", stuck);
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
  // Whole or split, whatever the schedule's name: the runtime runs either
  // (a list read from a file may split the backwards of a 1F1B placement).
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < m; ++i) {
      auto n = [&](ActionType t) { auto it = count.find(key(t, s, i)); return it == count.end() ? 0 : it->second; };
      const std::string where = "stage " + std::to_string(s) + " micro-batch " + std::to_string(i);
      TITAN_CHECK(n(ActionType::Forward) == 1, "schedule runs the forward of ", where, " ", n(ActionType::Forward),
                  " times (must be once)");
      const int whole = n(ActionType::Backward), in = n(ActionType::BackwardInput), w = n(ActionType::BackwardWeight);
      TITAN_CHECK((whole == 1 && in == 0 && w == 0) || (whole == 0 && in == 1 && w == 1), "schedule runs ", whole,
                  " B, ", in, " I and ", w, " W for ", where, " (must be one B, or one I and one W)");
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
        const double end = ready + costs.of(a);
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
  const std::vector<RankActions> with_comm = add_communication(spec, lists);
  check_message_order(spec, with_comm);
  check_blocking_sends(spec, with_comm, /*forward_only=*/false);
  check_blocking_sends(spec, with_comm, /*forward_only=*/true);
  for (int r = 0; r < p; ++r) run.makespan = std::max(run.makespan, free_at[r]);
  for (int r = 0; r < p; ++r) run.bubble.push_back(run.makespan > 0 ? 1.0 - run.busy[r] / run.makespan : 0.0);
  return run;
}

}  // namespace titan::pp
