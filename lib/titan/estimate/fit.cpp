// fit.hpp: the ranks over the budget, and the first layout in the search
// order whose every rank fits.
#include "titan/estimate/fit.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "titan/config/validate.hpp"
#include "titan/metrics/format.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::estimate {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double peak_gib(const JobEstimate& e) { return static_cast<double>(e.worst().peak) / kGiB; }

// The overrides that turn `cfg` into `c` (only the keys the search moves),
// one "--section.key value" each.
std::vector<std::string> overrides_between(const config::JobConfig& cfg, const config::JobConfig& c) {
  std::vector<std::string> s;
  auto add = [&s](const std::string& key, const std::string& value) { s.push_back("--" + key + " " + value); };
  if (c.training.tensor_parallel_degree != cfg.training.tensor_parallel_degree)
    add("training.tensor_parallel_degree", std::to_string(c.training.tensor_parallel_degree));
  if (c.experimental.pipeline_parallel_degree != cfg.experimental.pipeline_parallel_degree)
    add("experimental.pipeline_parallel_degree", std::to_string(c.experimental.pipeline_parallel_degree));
  if (c.training.data_parallel_replicate_degree != cfg.training.data_parallel_replicate_degree)
    add("training.data_parallel_replicate_degree", std::to_string(c.training.data_parallel_replicate_degree));
  if (c.training.data_parallel_shard_degree != cfg.training.data_parallel_shard_degree)
    add("training.data_parallel_shard_degree", std::to_string(c.training.data_parallel_shard_degree));
  if (c.activation_checkpoint.mode != cfg.activation_checkpoint.mode)
    add("activation_checkpoint.mode", c.activation_checkpoint.mode);
  if (c.training.fsdp_reduce_scatter_per_microbatch != cfg.training.fsdp_reduce_scatter_per_microbatch)
    add("training.fsdp_reduce_scatter_per_microbatch", c.training.fsdp_reduce_scatter_per_microbatch ? "true" : "false");
  if (c.training.fsdp_reshard_after_forward != cfg.training.fsdp_reshard_after_forward)
    add("training.fsdp_reshard_after_forward", c.training.fsdp_reshard_after_forward);
  return s;
}

// What the search may change besides the degrees.
struct Move {
  std::string ac_mode;
  bool reduce_scatter_per_microbatch = false;
  std::string reshard_after_forward;
};

// The config's own choices first, then activation checkpointing, then,
// under PP x FSDP, FSDP reducing every micro-batch (no unsharded gradient
// sums over the step, the largest term at scale) alone and with
// resharding after every forward and backward (a stage then holds two
// blocks' gathered weights, not all): both cost communication, so each
// comes after what the config already says.
std::vector<Move> moves_of(const config::JobConfig& cfg) {
  std::vector<std::string> ac_modes{cfg.activation_checkpoint.mode};
  if (cfg.activation_checkpoint.mode != "full") ac_modes.push_back("full");
  std::vector<Move> out;
  for (const std::string& ac : ac_modes) {
    const std::string& reshard = cfg.training.fsdp_reshard_after_forward;
    out.push_back({ac, cfg.training.fsdp_reduce_scatter_per_microbatch, reshard});
    if (!cfg.training.fsdp_reduce_scatter_per_microbatch) out.push_back({ac, true, reshard});
    if (reshard != "always") out.push_back({ac, true, "always"});
  }
  return out;
}

// What FSDP's moves under PP cost in collectives (one line; "" when the
// layout keeps the config's reduction and resharding).
std::string fsdp_move_cost(const config::JobConfig& cfg, const config::JobConfig& c, const JobEstimate& estimate) {
  std::vector<std::string> parts;
  if (c.training.fsdp_reduce_scatter_per_microbatch != cfg.training.fsdp_reduce_scatter_per_microbatch) {
    const config::BatchPlan batches = config::plan_batches(c, estimate.dims.dp_degree());
    const int64_t microbatches =
        batches.accumulation_steps * (batches.local_batch / c.experimental.pipeline_parallel_microbatch_size);
    parts.push_back(titan::strprintf("reduce-scatters each unit %lld times a step instead of once",
                                     static_cast<long long>(microbatches)));
  }
  if (c.training.fsdp_reshard_after_forward != cfg.training.fsdp_reshard_after_forward)
    parts.push_back("gathers a block again at each forward and backward that finds it freed");
  if (parts.empty()) return "";
  std::string s = "FSDP " + parts.front();
  if (parts.size() > 1) s += " and " + parts.back();
  return s;
}

}  // namespace

FitAdvice fit_advice(const config::JobConfig& cfg, int64_t world_size, const JobEstimate& e, double budget_gib) {
  TITAN_CHECK(budget_gib > 0, "titan estimate: the device memory budget must be positive, got ", budget_gib, " GiB");
  FitAdvice a;
  a.budget_gib = budget_gib;
  a.worst_peak_gib = peak_gib(e);
  for (const RankMemory& r : e.ranks)
    if (static_cast<double>(r.peak) / kGiB > budget_gib) a.over_budget_pp_ranks.push_back(r.pp_rank);
  if (a.over_budget_pp_ranks.empty()) return a;

  const std::vector<Move> moves = moves_of(cfg);
  const int64_t cp = std::max<int64_t>(cfg.training.context_parallel_degree, 1);
  for (int64_t world = world_size; world <= 64 * world_size; world *= 2) {
    // Of the layouts that fit on this many ranks, the one closest to the
    // config: the fewest changed keys, then the least PP, then the least TP.
    std::tuple<size_t, int64_t, int64_t> best_key{SIZE_MAX, 0, 0};
    for (int64_t pp : {1, 2, 4, 8, 16}) {
      for (int64_t tp : {1, 2, 4, 8}) {
        for (const Move& m : moves) {
          // FSDP's moves are for pipelined stages: without PP the reduction
          // is per micro-batch already and "always" frees one block more.
          const bool fsdp_move = m.reduce_scatter_per_microbatch != cfg.training.fsdp_reduce_scatter_per_microbatch ||
                                 m.reshard_after_forward != cfg.training.fsdp_reshard_after_forward;
          if (fsdp_move && pp == 1) continue;
          config::JobConfig c = cfg;
          c.training.tensor_parallel_degree = tp;
          c.experimental.pipeline_parallel_degree = pp;
          c.activation_checkpoint.mode = m.ac_mode;
          c.training.fsdp_reduce_scatter_per_microbatch = m.reduce_scatter_per_microbatch;
          c.training.fsdp_reshard_after_forward = m.reshard_after_forward;
          // FSDP takes the ranks the others leave; replicas stay as written
          // when they still divide the world, else go.
          if (world % (tp * pp * cp) != 0) continue;
          const int64_t rest = world / (tp * pp * cp);
          if (rest % std::max<int64_t>(cfg.training.data_parallel_replicate_degree, 1) != 0)
            c.training.data_parallel_replicate_degree = 1;
          const int64_t shard = rest / std::max<int64_t>(c.training.data_parallel_replicate_degree, 1);
          // The written value when it still resolves to the same degree (-1,
          // or the same number); else the degree itself, said explicitly.
          if (cfg.training.data_parallel_shard_degree != -1 && cfg.training.data_parallel_shard_degree != shard)
            c.training.data_parallel_shard_degree = shard;
          JobEstimate candidate;
          try {
            candidate = estimate_job(c, world);
          } catch (const Error&) {
            continue;  // degrees the model or the batch cannot take (heads, layers, micro-batches)
          }
          if (fsdp_move && !candidate.dims.fsdp_enabled()) continue;
          if (peak_gib(candidate) > budget_gib) continue;
          const std::vector<std::string> changes = overrides_between(cfg, c);
          const std::tuple<size_t, int64_t, int64_t> key{changes.size(), pp, tp};
          if (key >= best_key) continue;
          best_key = key;
          a.found = true;
          a.overrides.clear();
          for (const std::string& o : changes) a.overrides += (a.overrides.empty() ? "" : " ") + o;
          a.world_size = world;
          a.peak_gib = peak_gib(candidate);
          a.cost.clear();
          a.cost = fsdp_move_cost(cfg, c, candidate);
        }
      }
    }
    if (a.found) return a;
  }
  return a;
}

std::string format_fit_advice(const FitAdvice& a, int64_t world_size) {
  std::string s;
  if (a.over_budget_pp_ranks.empty())
    return titan::strprintf("fits       every rank within %.0f GiB (peak %.1f GiB)\n", a.budget_gib,
                              a.worst_peak_gib);
  std::string ranks;
  for (int r : a.over_budget_pp_ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  s += titan::strprintf("over       pp rank%s %s over %.0f GiB per rank (peak %.1f GiB) on %lld ranks\n",
                          a.over_budget_pp_ranks.size() > 1 ? "s" : "", ranks.c_str(), a.budget_gib,
                          a.worst_peak_gib, static_cast<long long>(world_size));
  if (!a.found) {
    s += titan::strprintf("fit        no layout with TP <= 8 and PP <= 16 fits on up to %lld ranks\n",
                            static_cast<long long>(64 * world_size));
    return s;
  }
  const std::string world =
      a.world_size == world_size ? "" : titan::strprintf("--nproc %lld ", static_cast<long long>(a.world_size));
  s += titan::strprintf("fit        %s%s: peak %.1f GiB per rank\n", world.c_str(),
                          a.overrides.empty() ? "(the layout as written)" : a.overrides.c_str(), a.peak_gib);
  if (!a.cost.empty()) s += "cost       " + a.cost + " (docs/train.md)\n";
  return s;
}

}  // namespace titan::estimate
