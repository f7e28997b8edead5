#include "titan/train/fake_rank_report.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "titan/metrics/format.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::train {

using metrics::human_bytes;
using titan::strprintf;

namespace {

std::string bytes(int64_t b) { return human_bytes(static_cast<double>(b)); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string steps_words(const std::vector<int64_t>& steps) {
  if (steps.empty()) return "no step";
  if (steps.size() == 1) return strprintf("step %lld", static_cast<long long>(steps.front()));
  return strprintf("steps %lld-%lld", static_cast<long long>(steps.front()), static_cast<long long>(steps.back()));
}

// "24 all_gather on dp_shard (96.0 MiB)" per op and group, largest first.
std::string skipped_words(const std::vector<dist::CommRecord>& records) {
  std::map<std::pair<std::string, std::string>, dist::CommTotals> totals;
  for (const dist::CommRecord& r : records) {
    dist::CommTotals& t = totals[{dist::comm_op_name(r.op), r.group}];
    t.count += 1;
    t.payload_bytes += r.payload_bytes;
    t.wire_bytes += r.wire_bytes;
  }
  std::vector<std::pair<std::pair<std::string, std::string>, dist::CommTotals>> rows(totals.begin(), totals.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second.wire_bytes > b.second.wire_bytes; });
  std::string out;
  int64_t wire = 0;
  for (const auto& [key, t] : rows) {
    out += strprintf("\n            %5lld %-14s on %-12s payload %10s, sent %10s", static_cast<long long>(t.count),
                     key.first.c_str(), key.second.c_str(), bytes(t.payload_bytes).c_str(),
                     bytes(t.wire_bytes).c_str());
    wire += t.wire_bytes;
  }
  return strprintf("%zu ops, %s this rank would have sent (ring algorithms)", records.size(), bytes(wire).c_str()) +
         out;
}

}  // namespace

std::string fake_rank_banner_line(int rank, int world_size) {
  return strprintf("  comm      fake_backend: this process is rank %d of %d; no collective or P2P op communicates "
                   "(each returns what peers that mirror this rank would send; receives read ones), so memory and "
                   "step time are this rank's, and the loss, gradient norm and tokens are not results\n",
                   rank, world_size);
}

std::string fake_rank_report(const FakeRankRun& run, const estimate::JobEstimate& estimate) {
  const estimate::RankMemory* est = nullptr;
  for (const estimate::RankMemory& r : estimate.ranks)
    if (r.pp_rank == run.pp_rank) est = &r;
  std::string out = strprintf("fake rank %d of %d (pipeline rank %d): nothing was communicated\n", run.rank,
                              run.world_size, run.pp_rank);
  out += strprintf("  memory    tensor peak %s in %s", bytes(run.step_peak).c_str(), steps_words(run.peak_steps).c_str());
  if (est)
    out += strprintf("; titan estimate: %s (estimate / measured %.3f, peak at %s)", bytes(est->peak).c_str(),
                     run.step_peak > 0 ? static_cast<double>(est->peak) / static_cast<double>(run.step_peak) : 0.0,
                     est->peak_phase.c_str());
  out += "\n";
  out += strprintf("            parameters %s, optimizer state %s", bytes(run.parameters).c_str(),
                   bytes(run.optimizer_state).c_str());
  if (est)
    out += strprintf(" (estimate %s, %s)", bytes(est->parameters).c_str(), bytes(est->optimizer_state).c_str());
  if (run.process_peak > 0)
    out += strprintf("; %s %s", run.process_peak_source.c_str(), bytes(run.process_peak).c_str());
  out += "\n";
  out += strprintf("  step      %.3f s median over %s, compute alone (no transfer was waited for)\n",
                   median(run.step_seconds), steps_words(run.peak_steps).c_str());
  out += "  skipped   in the last step: " + skipped_words(run.last_step_comm) + "\n";
  return out;
}

}  // namespace titan::train
