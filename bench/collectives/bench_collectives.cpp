// Collective bandwidth on Gloo, as nccl-tests reports it:
//   algbw = S / t               (S: the payload, see titan/dist/comm_log.hpp)
//   busbw = algbw × factor      (all-reduce 2(n−1)/n; all-gather,
//                                reduce-scatter, all-to-all (n−1)/n)
// busbw is comparable across world sizes: it is what each link carries.
//
//   build/bin/bench_collectives --nproc 4 [--benchmark_filter=all_reduce]
//
// Every rank runs the same benchmarks with the same fixed iteration counts
// (Google Benchmark must not pick them per rank, or the ranks would call
// different numbers of collectives); rank 0 reports, timing each iteration
// between barriers-free collectives as the slowest rank sees it.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <functional>

#include "titan/dist/comm_log.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/program.hpp"

namespace {

using titan::dist::CommOp;

// One collective with payload `bytes` on the world group.
std::function<void()> make_op(CommOp op, int64_t bytes) {
  const auto& g = *titan::dist::world().group();
  const int n = g.size();
  const int64_t elems = bytes / 4;
  switch (op) {
    case CommOp::AllReduce: {
      auto x = std::make_shared<at::Tensor>(at::ones({elems}));
      return [x, &g] { g.all_reduce(*x); };
    }
    case CommOp::AllGather: {
      auto x = std::make_shared<at::Tensor>(at::ones({elems / n}));
      return [x, &g] { (void)g.all_gather(*x); };
    }
    case CommOp::ReduceScatter: {
      auto x = std::make_shared<at::Tensor>(at::ones({elems / n * n}));
      return [x, &g] { (void)g.reduce_scatter(*x); };
    }
    case CommOp::AllToAll: {
      auto x = std::make_shared<at::Tensor>(at::ones({elems / n * n}));
      return [x, &g] { (void)g.all_to_all(*x, 0, 0); };
    }
    default: return [] {};
  }
}

void run_collective(benchmark::State& state, CommOp op) {
  const int64_t bytes = state.range(0);
  const int n = titan::dist::world().size();
  auto fn = make_op(op, bytes);
  fn();  // warm-up: connections, allocations
  titan::dist::world().group()->barrier();
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    fn();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  // Rates in GB per second of manual time (Google Benchmark prints them
  // with a "/s" suffix), as nccl-tests define algbw and busbw.
  const double factor = titan::dist::bus_bandwidth_factor(op, n);
  state.counters["algbw_GB"] = benchmark::Counter(static_cast<double>(bytes) / 1e9,
                                                    benchmark::Counter::kIsIterationInvariantRate);
  state.counters["busbw_GB"] = benchmark::Counter(static_cast<double>(bytes) * factor / 1e9,
                                                    benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ranks"] = n;
  state.SetBytesProcessed(state.iterations() * bytes);
}

// Fixed iteration counts: more for small payloads, few for 64 MiB.
void register_all() {
  const std::pair<const char*, CommOp> ops[] = {{"all_reduce", CommOp::AllReduce},
                                                {"all_gather", CommOp::AllGather},
                                                {"reduce_scatter", CommOp::ReduceScatter},
                                                {"all_to_all", CommOp::AllToAll}};
  for (const auto& [name, op] : ops) {
    for (int64_t bytes = 4 << 10; bytes <= (64 << 20); bytes *= 4) {
      int64_t iters = std::max<int64_t>(3, std::min<int64_t>(200, (64LL << 20) / bytes));
      benchmark::RegisterBenchmark(name, [op = op](benchmark::State& s) { run_collective(s, op); })
          ->Arg(bytes)
          ->Iterations(iters)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

class SilentReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  return titan::run_main(argc, argv, [](int argc, char** argv) {
    const auto& world = titan::dist::init_distributed({.device = "cpu"});
    titan::dist::CommLog::instance().set_enabled(false);
    benchmark::Initialize(&argc, argv);
    register_all();
    if (world.rank() == 0) {
      std::printf("Gloo collectives, %d ranks on one machine (loopback)\n", world.size());
      benchmark::RunSpecifiedBenchmarks();
    } else {
      SilentReporter silent;
      benchmark::RunSpecifiedBenchmarks(&silent);
    }
    benchmark::Shutdown();
    return 0;
  });
}
