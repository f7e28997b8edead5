// Schedule generation: one function per schedule, each returning the
// compute order of every rank; communication is added by one more pass.
#include "titan/parallel/pipeline/schedule.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <deque>
#include <map>
#include <sstream>

#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::pp {

const char* action_code(ActionType t) {
  switch (t) {
    case ActionType::Forward: return "F";
    case ActionType::Backward: return "B";
    case ActionType::BackwardInput: return "I";
    case ActionType::BackwardWeight: return "W";
    case ActionType::SendForward: return "SEND_F";
    case ActionType::RecvForward: return "RECV_F";
    case ActionType::SendBackward: return "SEND_B";
    case ActionType::RecvBackward: return "RECV_B";
  }
  return "?";
}

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const std::vector<std::pair<ScheduleKind, std::string>>& kind_names() {
  static const std::vector<std::pair<ScheduleKind, std::string>> names = {
      {ScheduleKind::GPipe, "GPipe"},
      {ScheduleKind::OneFOneB, "1F1B"},
      {ScheduleKind::Interleaved1F1B, "Interleaved1F1B"},
      {ScheduleKind::LoopedBFS, "LoopedBFS"},
      {ScheduleKind::InterleavedZeroBubble, "InterleavedZeroBubble"},
      {ScheduleKind::ZBVZeroBubble, "ZBVZeroBubble"}};
  return names;
}

Action F(int s, int i) { return {ActionType::Forward, s, i}; }
Action B(int s, int i) { return {ActionType::Backward, s, i}; }

// GPipe: every forward, then every backward. The backwards run from the
// last micro-batch to the first, as the GPipe paper draws it: the last stage can
// start the backward of the micro-batch it has just finished.
std::vector<RankActions> gpipe(const ScheduleSpec& spec) {
  std::vector<RankActions> out(spec.pp);
  for (int r = 0; r < spec.pp; ++r) {
    for (int i = 0; i < spec.microbatches; ++i) out[r].push_back(F(r, i));
    for (int i = spec.microbatches - 1; i >= 0; --i) out[r].push_back(B(r, i));
  }
  return out;
}

// 1F1B (PipeDream-Flush): rank r runs pp-1-r warm-up forwards, then
// alternates one forward and one backward, then drains the backwards. It
// never holds more than pp-r micro-batches of activations.
std::vector<RankActions> one_f_one_b(const ScheduleSpec& spec) {
  const int p = spec.pp, m = spec.microbatches;
  std::vector<RankActions> out(p);
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min(p - 1 - r, m);
    for (int i = 0; i < warmup; ++i) out[r].push_back(F(r, i));
    for (int i = 0; i < m - warmup; ++i) {
      out[r].push_back(F(r, warmup + i));
      out[r].push_back(B(r, i));
    }
    for (int i = m - warmup; i < m; ++i) out[r].push_back(B(r, i));
  }
  return out;
}

// Interleaved 1F1B (Megatron-LM's virtual pipeline): micro-batches go
// through rank r's v chunks in rounds of pp. Forward number k of the rank
// is chunk (k / pp) mod v of micro-batch (k / (pp·v))·pp + k mod pp; the
// backwards visit the chunks in reverse. Warm-up: 2·(pp−1−r) + (v−1)·pp
// forwards, then one forward / one backward, then the drain.
std::vector<RankActions> interleaved_1f1b(const ScheduleSpec& spec) {
  const int p = spec.pp, v = spec.stages_per_rank, m = spec.microbatches;
  const int total = v * m;
  auto mb_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto chunk_of = [&](int k, bool forward) {
    const int c = (k % (p * v)) / p;
    return forward ? c : v - 1 - c;
  };
  std::vector<RankActions> out(p);
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min(total, 2 * (p - 1 - r) + (v - 1) * p);
    auto fwd = [&](int k) { return F(chunk_of(k, true) * p + r, mb_of(k)); };
    auto bwd = [&](int k) { return B(chunk_of(k, false) * p + r, mb_of(k)); };
    for (int k = 0; k < warmup; ++k) out[r].push_back(fwd(k));
    for (int k = 0; k < total - warmup; ++k) {
      out[r].push_back(fwd(warmup + k));
      out[r].push_back(bwd(k));
    }
    for (int k = total - warmup; k < total; ++k) out[r].push_back(bwd(k));
  }
  return out;
}

// Looped BFS (breadth first): each of the rank's stages runs every
// micro-batch before the next stage starts; backwards in reverse, stage by
// stage.
std::vector<RankActions> looped_bfs(const ScheduleSpec& spec) {
  std::vector<RankActions> out(spec.pp);
  for (int r = 0; r < spec.pp; ++r) {
    const std::vector<int> stages = spec.stages_of_rank(r);
    for (int s : stages)
      for (int i = 0; i < spec.microbatches; ++i) out[r].push_back(F(s, i));
    for (auto it = stages.rbegin(); it != stages.rend(); ++it)
      for (int i = spec.microbatches - 1; i >= 0; --i) out[r].push_back(B(*it, i));
  }
  return out;
}

// The zero-bubble schedules (Qi et al. 2023, "Zero Bubble Pipeline
// Parallelism") by list scheduling: time advances in unit steps (F, I and W
// cost 1 each); whenever a rank is free it starts, in this order of
// preference, (1) a ready I — the critical path runs through the input
// gradients —, (2) a ready forward of one of its later stages (work
// already inside the rank), (3) a forward of its first stage, i.e. a new
// micro-batch, while fewer than pp micro-batches it let in still wait for
// their last W (the same activation budget as 1F1B's first rank), (4) the
// oldest pending W, which fills what would otherwise be bubble. Per stage,
// micro-batches keep their order. Dependencies: F(s,i) after F(s−1,i);
// I(s,i) after F(s,i) and I(s+1,i); W(s,i) after I(s,i). The result is a
// fixed order per rank; the runtime does not depend on these costs (any
// order that is acyclic with the dependencies runs under any timing).
std::vector<RankActions> zero_bubble(const ScheduleSpec& spec) {
  const int p = spec.pp, m = spec.microbatches, S = spec.num_stages();
  std::vector<RankActions> out(p);
  // done[type][s][i]: the time it finished (−1 = not yet).
  std::vector<std::vector<int>> f_done(S, std::vector<int>(m, -1)), i_done = f_done, w_done = f_done;
  std::vector<int> next_f(S, 0), next_i(S, 0);
  std::vector<int> busy_until(p, 0);
  std::vector<std::deque<std::pair<int, int>>> pending_w(p);  // (stage, mb) whose I is done
  std::vector<int> admitted(p, 0), retired(p, 0);              // micro-batches in at the first stage, out at last W
  int remaining = 3 * S * m;
  auto rank_stages = [&](int r) { return spec.stages_of_rank(r); };
  for (int t = 0; remaining > 0; ++t) {
    TITAN_INTERNAL_ASSERT(t < 100 * (S * m + p), "zero-bubble list scheduling made no progress");
    for (int r = 0; r < p; ++r) {
      if (busy_until[r] > t) continue;
      const std::vector<int> stages = rank_stages(r);
      const int first = stages.front();
      auto f_ready = [&](int s) {
        const int i = next_f[s];
        return i < m && (s == 0 || (f_done[s - 1][i] >= 0 && f_done[s - 1][i] <= t));
      };
      auto i_ready = [&](int s) {
        const int i = next_i[s];
        return i < m && f_done[s][i] >= 0 && f_done[s][i] <= t &&
               (s == S - 1 || (i_done[s + 1][i] >= 0 && i_done[s + 1][i] <= t));
      };
      Action a{};
      bool chosen = false;
      // (1) input gradients, the lowest micro-batch first, then the later stage.
      int best = -1;
      for (int s : stages)
        if (i_ready(s) && (best < 0 || next_i[s] < next_i[best] || (next_i[s] == next_i[best] && s > best))) best = s;
      if (best >= 0) a = {ActionType::BackwardInput, best, next_i[best]}, chosen = true;
      // (2) forwards of later stages, the latest stage first.
      if (!chosen)
        for (auto it = stages.rbegin(); it != stages.rend(); ++it)
          if (*it != first && f_ready(*it)) {
            a = F(*it, next_f[*it]), chosen = true;
            break;
          }
      // (3) a new micro-batch, within the activation budget.
      if (!chosen && f_ready(first) && admitted[r] - retired[r] < p) a = F(first, next_f[first]), chosen = true;
      // (4) deferred weight gradients fill the gap.
      if (!chosen && !pending_w[r].empty()) {
        auto [s, i] = pending_w[r].front();
        pending_w[r].pop_front();
        a = {ActionType::BackwardWeight, s, i}, chosen = true;
      }
      if (!chosen) continue;
      out[r].push_back(a);
      busy_until[r] = t + 1;
      --remaining;
      if (a.type == ActionType::Forward) {
        f_done[a.stage][a.microbatch] = t + 1;
        ++next_f[a.stage];
        if (a.stage == first) ++admitted[r];
      } else if (a.type == ActionType::BackwardInput) {
        i_done[a.stage][a.microbatch] = t + 1;
        ++next_i[a.stage];
        pending_w[r].emplace_back(a.stage, a.microbatch);
      } else {
        w_done[a.stage][a.microbatch] = t + 1;
        // A micro-batch leaves the rank's budget with its W on the first stage
        // (the last of its W's here: the first stage's backward comes last).
        if (a.stage == first) ++retired[r];
      }
    }
  }
  return out;
}

}  // namespace

std::string Action::str() const { return std::to_string(stage) + action_code(type) + std::to_string(microbatch); }

Action parse_action(const std::string& text) {
  const size_t b = text.find_first_not_of(" \t"), e = text.find_last_not_of(" \t");
  const std::string t = b == std::string::npos ? std::string() : text.substr(b, e - b + 1);
  size_t i = 0;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i;
  size_t j = t.size();
  while (j > i && std::isdigit(static_cast<unsigned char>(t[j - 1]))) --j;
  const std::string code = t.substr(i, j - i);
  for (const char* fsdp : {"UNSHARD", "RESHARD", "REDUCE_GRAD"})
    TITAN_CHECK(code != fsdp, "'", t, "' is torch's FSDP action ", fsdp,
                ", which titan's stages do on their own: leave it out of the schedule");
  const ActionType types[] = {ActionType::Forward,      ActionType::Backward,       ActionType::BackwardInput,
                              ActionType::BackwardWeight, ActionType::SendForward,  ActionType::RecvForward,
                              ActionType::SendBackward, ActionType::RecvBackward};
  for (ActionType type : types) {
    if (code != action_code(type)) continue;
    TITAN_CHECK(i > 0 && j < t.size() && i <= 9 && t.size() - j <= 9, "'", t,
                "' is not an action: torch's spelling is <stage><type><micro-batch>, e.g. 2F0");
    return Action{type, std::stoi(t.substr(0, i)), std::stoi(t.substr(j))};
  }
  throw Error("'" + t + "' is not an action: torch's spelling is <stage><type><micro-batch> with type F, B, I, W, "
              "SEND_F, RECV_F, SEND_B or RECV_B, e.g. 2F0");
}

bool Action::is_compute() const {
  return type == ActionType::Forward || type == ActionType::Backward || type == ActionType::BackwardInput ||
         type == ActionType::BackwardWeight;
}

std::optional<ActionType> Action::computes() const {
  if (stage == 0 && type == ActionType::BackwardInput) return std::nullopt;
  if (stage == 0 && type == ActionType::BackwardWeight) return ActionType::Backward;
  return type;
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  std::string names;
  for (const auto& [kind, n] : kind_names()) {
    if (lower(n) == lower(name)) return kind;
    names += (names.empty() ? "" : ", ") + n;
  }
  throw Error("unknown pipeline schedule '" + name + "' (known, in any letter case: " + names + ")");
}

std::string schedule_name(ScheduleKind kind) {
  for (const auto& [k, n] : kind_names())
    if (k == kind) return n;
  return "?";
}

bool is_multi_stage(ScheduleKind kind) {
  return kind == ScheduleKind::Interleaved1F1B || kind == ScheduleKind::LoopedBFS ||
         kind == ScheduleKind::InterleavedZeroBubble || kind == ScheduleKind::ZBVZeroBubble;
}

bool splits_backward(ScheduleKind kind) {
  return kind == ScheduleKind::InterleavedZeroBubble || kind == ScheduleKind::ZBVZeroBubble;
}

int ScheduleSpec::rank_of_stage(int stage) const {
  if (kind == ScheduleKind::ZBVZeroBubble) return stage < pp ? stage : num_stages() - 1 - stage;
  return stage % pp;
}

std::vector<int> ScheduleSpec::stages_of_rank(int rank) const {
  std::vector<int> out;
  for (int s = 0; s < num_stages(); ++s)
    if (rank_of_stage(s) == rank) out.push_back(s);
  return out;
}

void ScheduleSpec::validate() const {
  const std::string name = schedule_name(kind);
  TITAN_CHECK(pp >= 1, "pipeline schedule ", name, ": pipeline_parallel_degree must be >= 1, got ", pp);
  TITAN_CHECK(microbatches >= 1, "pipeline schedule ", name, ": needs at least 1 micro-batch, got ", microbatches);
  if (kind == ScheduleKind::ZBVZeroBubble)
    TITAN_CHECK(stages_per_rank == 2, "pipeline schedule ZBVZeroBubble runs exactly 2 stages per rank (a V), got ",
                stages_per_rank);
  else if (is_multi_stage(kind))
    TITAN_CHECK(stages_per_rank >= 2, "pipeline schedule ", name,
                " runs several stages per rank: needs >= 2 stages per rank, got ", stages_per_rank,
                " (use GPipe or 1F1B for one stage per rank)");
  else
    TITAN_CHECK(stages_per_rank == 1, "pipeline schedule ", name, " runs one stage per rank, got ", stages_per_rank,
                " stages per rank (use Interleaved1F1B, LoopedBFS or a zero-bubble schedule)");
  const bool needs_full = kind != ScheduleKind::GPipe && kind != ScheduleKind::LoopedBFS;
  TITAN_CHECK(!needs_full || microbatches >= pp, "pipeline schedule ", name, " needs at least as many micro-batches (",
              microbatches, ") as pipeline ranks (", pp,
              "): raise the local batch or lower pipeline_parallel_microbatch_size");
  TITAN_CHECK(kind != ScheduleKind::Interleaved1F1B || microbatches % pp == 0, "pipeline schedule Interleaved1F1B runs "
              "micro-batches in rounds of pipeline_parallel_degree (", pp, "): ", microbatches,
              " micro-batches do not divide into them");
}

std::string ScheduleSpec::describe() const {
  std::ostringstream os;
  os << schedule_name(kind) << ", " << pp << " rank" << (pp == 1 ? "" : "s") << " x " << stages_per_rank << " stage"
     << (stages_per_rank == 1 ? "" : "s") << ", " << microbatches << " micro-batch" << (microbatches == 1 ? "" : "es");
  return os.str();
}

std::vector<RankActions> compute_actions(const ScheduleSpec& spec) {
  spec.validate();
  switch (spec.kind) {
    case ScheduleKind::GPipe: return gpipe(spec);
    case ScheduleKind::OneFOneB: return one_f_one_b(spec);
    case ScheduleKind::Interleaved1F1B: return interleaved_1f1b(spec);
    case ScheduleKind::LoopedBFS: return looped_bfs(spec);
    case ScheduleKind::InterleavedZeroBubble:
    case ScheduleKind::ZBVZeroBubble: return zero_bubble(spec);
  }
  throw Error("unknown schedule kind");
}

double ActionCosts::of(const Action& a) const {
  switch (a.type) {
    case ActionType::Forward: return forward;
    case ActionType::Backward: return backward;
    case ActionType::BackwardInput: return backward_input;
    case ActionType::BackwardWeight: return backward_weight;
    default: return 0;
  }
}

std::vector<RankActions> add_communication(const ScheduleSpec& spec, const std::vector<RankActions>& compute,
                                           const ActionCosts& costs) {
  const int S = spec.num_stages();
  const int p = static_cast<int>(compute.size());
  // The message a compute action sends (as the receiving action) and the
  // one it needs, if any: F of stage s sends stage s+1's input and needs its
  // own; B / I of stage s sends stage s-1's output gradient and needs its own.
  auto remote = [&](int stage, int rank) { return stage >= 0 && stage < S && spec.rank_of_stage(stage) != rank; };
  auto sends = [&](const Action& a, int rank, Action* msg) {
    const bool backward = a.type == ActionType::Backward || a.type == ActionType::BackwardInput;
    if (a.type == ActionType::Forward && remote(a.stage + 1, rank))
      *msg = {ActionType::RecvForward, a.stage + 1, a.microbatch};
    else if (backward && remote(a.stage - 1, rank))
      *msg = {ActionType::RecvBackward, a.stage - 1, a.microbatch};
    else
      return false;
    return true;
  };
  auto needs = [&](const Action& a, int rank, Action* msg) {
    const bool backward = a.type == ActionType::Backward || a.type == ActionType::BackwardInput;
    if (a.type == ActionType::Forward && remote(a.stage - 1, rank))
      *msg = {ActionType::RecvForward, a.stage, a.microbatch};
    else if (backward && remote(a.stage + 1, rank))
      *msg = {ActionType::RecvBackward, a.stage, a.microbatch};
    else
      return false;
    return true;
  };
  // Play the lists: each rank starts its next action as soon as it is free
  // and the action's message has arrived; a message arrives when the action
  // that sends it ends. Events go in time order (arrivals before starts at
  // the same moment, then by rank), and each is appended where it happens:
  // a start to its rank's list, an arrival to both ends (SEND on the
  // sender, RECV on the receiver). So every list follows one global order
  // in which each send sits at the same moment as its receive.
  struct InFlight {
    double at;
    int64_t order;  // ties at the same moment: sent first, placed first
    int from, to;
    Action send, recv;
  };
  using Arrived = std::tuple<int, int, int>;  // (type, stage, micro-batch) of a RECV on its rank
  std::map<std::pair<int, Arrived>, double> arrival_time;
  std::vector<InFlight> in_flight;
  std::vector<RankActions> out(compute.size());
  std::vector<size_t> next(compute.size(), 0);
  std::vector<double> free_at(compute.size(), 0.0);
  int64_t sent = 0;
  auto arrived_key = [](const Action& recv) {
    return Arrived{static_cast<int>(recv.type), recv.stage, recv.microbatch};
  };
  while (true) {
    int rank = -1;  // the rank whose next action starts first
    double start = 0;
    for (int r = 0; r < p; ++r) {
      if (next[r] == compute[r].size()) continue;
      const Action& a = compute[r][next[r]];
      double ready = free_at[r];
      Action need;
      if (needs(a, r, &need)) {
        auto it = arrival_time.find({r, arrived_key(need)});
        if (it == arrival_time.end()) continue;  // not sent yet
        ready = std::max(ready, it->second);
      }
      if (rank < 0 || ready < start) rank = r, start = ready;
    }
    auto first = std::min_element(in_flight.begin(), in_flight.end(), [](const InFlight& x, const InFlight& y) {
      return x.at < y.at || (x.at == y.at && x.order < y.order);
    });
    if (first != in_flight.end() && (rank < 0 || first->at <= start)) {
      out[static_cast<size_t>(first->from)].push_back(first->send);
      out[static_cast<size_t>(first->to)].push_back(first->recv);
      arrival_time[{first->to, arrived_key(first->recv)}] = first->at;
      in_flight.erase(first);
      continue;
    }
    if (rank < 0) break;
    const Action& a = compute[rank][next[rank]++];
    out[static_cast<size_t>(rank)].push_back(a);
    free_at[rank] = start + costs.of(a);
    Action msg;
    if (sends(a, rank, &msg))
      in_flight.push_back({free_at[rank], sent++, rank, spec.rank_of_stage(msg.stage),
                           {msg.type == ActionType::RecvForward ? ActionType::SendForward : ActionType::SendBackward,
                            a.stage, a.microbatch},
                           msg});
  }
  std::string stuck;
  for (int r = 0; r < p; ++r) {
    if (next[r] == compute[r].size()) continue;
    const Action& a = compute[r][next[r]];
    Action need;
    needs(a, r, &need);
    stuck += (stuck.empty() ? "" : ", ") + ("rank " + std::to_string(r) + "'s " + a.str() + " waits for " + need.str());
  }
  TITAN_CHECK(stuck.empty(), "pipeline schedule: the lists wait for each other: ", stuck,
              " (a message its sender's list sends only later, or never)");
  return out;
}

std::vector<RankActions> build_schedule(const ScheduleSpec& spec) { return add_communication(spec, compute_actions(spec)); }

std::string format_schedule(const std::vector<RankActions>& actions, bool compute_only) {
  std::ostringstream os;
  for (size_t r = 0; r < actions.size(); ++r) {
    os << "rank " << r << ":";
    for (const Action& a : actions[r])
      if (!compute_only || a.is_compute()) os << ' ' << a.str();
    os << '\n';
  }
  return os.str();
}

double analytic_bubble_fraction(const ScheduleSpec& spec) {
  const double p = spec.pp, m = spec.microbatches, v = spec.stages_per_rank;
  switch (spec.kind) {
    case ScheduleKind::GPipe:
    case ScheduleKind::OneFOneB: return (p - 1) / (m + p - 1);
    case ScheduleKind::Interleaved1F1B: return (p - 1) / (v * m + p - 1);
    case ScheduleKind::LoopedBFS: return m >= p ? (p - 1) / (v * m + p - 1) : -1.0;
    default: return -1.0;
  }
}

}  // namespace titan::pp
