#include "titan/predict/layout_search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <utility>

#include "titan/config/job_config.hpp"
#include "titan/config/validate.hpp"
#include "titan/models/llama3/job_layout.hpp"
#include "titan/parallel/parallel_dims.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::predict {
namespace {

// One point of the grid.
struct Layout {
  int64_t tp = 1, cp = 1, pp = 1, replicate = 1, shard = 1, accumulation = 1;
  std::string schedule;  // "" without PP
  std::string ac;        // "none", "op", "full"
};

std::string flags_of(const Layout& l, int64_t local_batch) {
  std::string f = strprintf("--training.tensor_parallel_degree %lld --training.context_parallel_degree %lld "
                            "--experimental.pipeline_parallel_degree %lld --training.data_parallel_replicate_degree "
                            "%lld --training.data_parallel_shard_degree %lld",
                            static_cast<long long>(l.tp), static_cast<long long>(l.cp), static_cast<long long>(l.pp),
                            static_cast<long long>(l.replicate), static_cast<long long>(l.shard));
  if (!l.schedule.empty()) f += " --experimental.pipeline_parallel_schedule " + l.schedule;
  if (l.ac == "op") f += " --activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option op";
  else f += " --activation_checkpoint.mode " + l.ac;
  f += strprintf(" --training.batch_size %lld", static_cast<long long>(local_batch));
  if (l.accumulation > 1) f += strprintf(" --training.gradient_accumulation_steps %lld", static_cast<long long>(l.accumulation));
  return f;
}

config::JobConfig config_of(config::JobConfig cfg, const Layout& l, int64_t local_batch) {
  cfg.training.tensor_parallel_degree = l.tp;
  cfg.training.context_parallel_degree = l.cp;
  cfg.experimental.pipeline_parallel_degree = l.pp;
  if (!l.schedule.empty()) cfg.experimental.pipeline_parallel_schedule = l.schedule;
  cfg.training.data_parallel_replicate_degree = l.replicate;
  cfg.training.data_parallel_shard_degree = l.shard;
  cfg.training.batch_size = local_batch;
  cfg.training.global_batch_size = -1;
  cfg.training.gradient_accumulation_steps = l.accumulation;
  cfg.activation_checkpoint.mode = l.ac == "op" ? "selective" : l.ac;
  cfg.activation_checkpoint.selective_ac_option = l.ac == "op" ? "op" : cfg.activation_checkpoint.selective_ac_option;
  return cfg;
}

// The parts of a prediction's slowest rank, by name, in seconds.
std::map<std::string, double> parts_of(const StepPrediction& p) {
  const RankPrediction* slow = &p.ranks.front();
  for (const RankPrediction& r : p.ranks)
    if (r.step > slow->step) slow = &r;
  std::map<std::string, double> out;
  const double recompute = static_cast<double>(slow->microbatches) * slow->per_microbatch.recompute;
  out["compute"] = slow->compute - recompute;
  out["recompute"] = recompute;
  out["optimizer"] = slow->optimizer;
  const double busy = slow->step - slow->exposed_comm - slow->optimizer;
  out["pipeline bubble"] = std::max(0.0, busy - slow->compute);
  for (const GroupComm& g : slow->comm) out["exposed " + group_display_name(g.group) + " communication"] += g.exposed;
  return out;
}

std::string why_slower(const StepPrediction& winner, const StepPrediction& other) {
  const auto a = parts_of(winner), b = parts_of(other);
  std::vector<std::pair<double, std::string>> diffs;
  std::map<std::string, bool> names;
  for (const auto& [k, v] : a) names[k] = true;
  for (const auto& [k, v] : b) names[k] = true;
  for (const auto& [k, unused] : names) {
    const double d = (b.count(k) ? b.at(k) : 0) - (a.count(k) ? a.at(k) : 0);
    if (std::abs(d) >= 0.005 * winner.step_seconds) diffs.push_back({d, k});
  }
  std::sort(diffs.begin(), diffs.end(), [](const auto& x, const auto& y) { return std::abs(x.first) > std::abs(y.first); });
  std::string out;
  for (const auto& [d, k] : diffs) out += strprintf("%s%s %+.3f s", out.empty() ? "" : ", ", k.c_str(), d);
  return out.empty() ? "the same parts within 0.5 %" : out;
}

}  // namespace

SearchResult search_layouts(const config::JobConfig& cfg, int64_t world, const Cluster& cluster) {
  const auto started = std::chrono::steady_clock::now();
  SearchResult result;
  // The job's global batch, as its own layout reads it.
  const parallel::ParallelDims own = parallel::ParallelDims::from_config(cfg, world);
  const int64_t global_batch = config::plan_batches(cfg, own.dp_degree()).global_batch;
  const models::llama3::ModelArgs args = models::llama3::job_model_args(cfg, std::nullopt);
  const int64_t seq = cfg.training.seq_len;

  std::vector<LayoutCandidate> fitting;
  auto try_layout = [&](const Layout& l) -> bool {  // true when it fits
    const int64_t dp = l.replicate * l.shard;
    if (global_batch % (dp * l.accumulation) != 0) return false;
    const int64_t local = global_batch / (dp * l.accumulation);
    const config::JobConfig c = config_of(cfg, l, local);
    StepPrediction p;
    try {
      const c10::Device device = c.training.device == "cpu" ? c10::Device(c10::kCPU) : c10::Device(c10::kCUDA);
      p = predict_step(models::llama3::plan_layout(c, world, device), cluster);
    } catch (const Error&) {
      ++result.refused;
      return false;
    }
    ++result.tried;
    if (!p.fits) {
      ++result.over_memory;
      return false;
    }
    fitting.push_back({flags_of(l, local), std::move(p)});
    return true;
  };

  for (int64_t tp : {1, 2, 4, 8}) {
    if (tp > cluster.gpus_per_node || world % tp != 0) continue;
    for (int64_t cp : {1, 2, 4, 8}) {
      if (cp > 1 && seq < 32768) continue;  // CP pays off for long sequences only
      if (world % (tp * cp) != 0) continue;
      for (int64_t pp : {1, 2, 4, 8, 16, 32}) {
        if (world % (tp * cp * pp) != 0 || pp > args.n_layers) continue;
        const int64_t dp = world / (tp * cp * pp);
        std::vector<std::pair<int64_t, int64_t>> data = {{1, dp}};
        // HSDP: a node's worth of shards, replicated across nodes.
        const int64_t node_shards = cluster.gpus_per_node / (tp * cp);
        if (node_shards > 1 && node_shards < dp && dp % node_shards == 0) data.push_back({dp / node_shards, node_shards});
        const std::vector<std::string> schedules =
            pp == 1 ? std::vector<std::string>{""} : std::vector<std::string>{"1F1B", "Interleaved1F1B", "ZBVZeroBubble"};
        for (const std::string& schedule : schedules)
          for (const auto& [replicate, shard] : data)
            for (const char* ac : {"none", "op", "full"}) {
              // The fewest accumulation steps that fit (more only cost time).
              for (int64_t accumulation : {1, 2, 4, 8, 16}) {
                Layout l{tp, cp, pp, replicate, shard, accumulation, schedule, ac};
                if (try_layout(l)) break;
              }
            }
      }
    }
  }
  std::sort(fitting.begin(), fitting.end(), [](const LayoutCandidate& a, const LayoutCandidate& b) {
    return a.prediction.step_seconds < b.prediction.step_seconds;
  });
  for (size_t i = 0; i < std::min<size_t>(2, fitting.size()); ++i) result.best.push_back(std::move(fitting[i]));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

std::string format_search(const SearchResult& r) {
  std::string out = strprintf("searched %lld layouts in %.1f s (%lld over the GPUs' memory; %lld refused by the "
                              "trainer's rules)\n",
                              static_cast<long long>(r.tried + r.refused), r.seconds,
                              static_cast<long long>(r.over_memory), static_cast<long long>(r.refused));
  if (r.best.empty()) return out + "no layout fits\n";
  const LayoutCandidate& w = r.best.front();
  out += "fastest: " + w.flags + "\n\n" + format_prediction(w.prediction);
  if (r.best.size() > 1) {
    const LayoutCandidate& s = r.best[1];
    out += strprintf("\nrunner-up: %s\n  %.1f %% slower (%s tokens/s per GPU less): %s\n", s.flags.c_str(),
                     100 * (s.prediction.step_seconds / w.prediction.step_seconds - 1),
                     strprintf("%.0f", w.prediction.tokens_per_second_per_gpu - s.prediction.tokens_per_second_per_gpu)
                         .c_str(),
                     why_slower(w.prediction, s.prediction).c_str());
  }
  return out;
}

}  // namespace titan::predict
