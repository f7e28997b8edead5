// bench_checkpoint: what a checkpoint costs, side by side in one run.
//
// For each model: the bytes one process saves; the time the training loop
// is blocked by a save in each [checkpoint] async_mode and the time until
// the checkpoint is complete (MB/s); the time to load it back (resharding
// path, CRC-32 check included); and a plain sequential write of the same
// number of bytes with one fsync at the end — the disk's own limit, which
// a synchronous save cannot beat.
//
//   ./build/bin/bench_checkpoint                          # debugmodel with Adam state, 1B weights
//   ./build/bin/bench_checkpoint --flavors debugmodel --repeats 5
//
// Medians over --repeats runs. Files go to --dir (default $TMPDIR); the
// page cache holds what was just written, so loads read memory, not disk
// (said in the output). One process: the numbers are per rank.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/file_io.hpp"
#include "titan/checkpoint/manager.hpp"
#include "titan/checkpoint/sharded_state.hpp"
#include "titan/util/files.hpp"
#include "titan/launch/options.hpp"
#include "titan/launch/program.hpp"
#include "titan/metrics/format.hpp"
#include "titan/models/llama3/flops.hpp"
#include "titan/models/llama3/transformer.hpp"
#include "titan/optim/lr_schedule.hpp"
#include "titan/optim/optimizer.hpp"
#include "titan/util/measure.hpp"
#include "titan/util/strprintf.hpp"

using namespace titan;

namespace {

uint64_t state_bytes(const checkpoint::ShardedState& s) {
  uint64_t b = 0;
  for (const auto& t : s) b += static_cast<uint64_t>(t.numel()) * t.local.element_size();
  return b;
}

// A plain write of `bytes` from memory, 64 MiB at a time, one fsync.
double plain_write_seconds(const std::string& path, uint64_t bytes) {
  std::vector<char> buf(size_t{64} << 20, 'x');
  const auto t0 = std::chrono::steady_clock::now();
  checkpoint::DurableFile f(path);
  for (uint64_t left = bytes; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
    f.write(buf.data(), n);
    left -= n;
  }
  f.close();
  const double s = seconds_since(t0);
  std::remove(path.c_str());
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    std::string flavors = "debugmodel,1B", dir = files::temp_dir() + "/titan_bench_checkpoint";
    int64_t repeats = 3;
    OptionParser parser("bench_checkpoint", "checkpoint save / load throughput and blocking time per async mode");
    parser.add("--flavors", &flavors, "comma-separated model flavors (debugmodel: with Adam state; others: weights only)");
    parser.add("--repeats", &repeats, "saves per mode (medians)");
    parser.add("--dir", &dir, "where the checkpoints are written (removed afterwards)");
    parser.parse(argc, argv);

    for (const std::string& flavor : split_commas(flavors)) {
      files::remove_all(dir);
      // The debug model as a trainer holds it (weights + both Adam
      // moments); a large flavor as an export holds it (weights only), in
      // fp32: 1B is about 5 GB, within this machine's memory.
      const bool with_optimizer = flavor == "debugmodel";
      models::llama3::ModelArgs args = models::llama3::flavor_args(flavor);
      args.max_seq_len = 256;
      models::llama3::Transformer model(args, at::TensorOptions().dtype(at::kFloat));
      {
        at::NoGradGuard g;
        for (auto& p : model->parameters()) p.normal_(0, 0.02);
      }
      auto optimizer = optim::build_optimizer(model->parameters(), optim::OptimizerOptions{});
      optim::LRScheduleOptions so;
      so.steps = 10;
      optim::LRScheduler scheduler(*optimizer, optim::LRSchedule(so));
      int64_t step = 1;
      checkpoint::TrainingState st;
      st.model_parts = {model.ptr().get()};
      st.optimizer = optimizer.get();
      st.scheduler = &scheduler;
      st.step = &step;
      const checkpoint::ShardedState shards = checkpoint::model_shards(st.model_parts, nullptr);
      uint64_t bytes = state_bytes(shards);
      if (with_optimizer) bytes += state_bytes(checkpoint::optimizer_shards(*optimizer, shards));
      std::printf("\n%s: %s%s, %.1f MB per save\n", flavor.c_str(),
                  titan::strprintf("%.3g", static_cast<double>(models::llama3::count_parameters(args))).c_str(),
                  with_optimizer ? " parameters + Adam moments" : " parameters (weights only)", bytes / 1e6);

      const double plain = [&] {
        std::vector<double> s;
        for (int64_t k = 0; k < repeats; ++k) s.push_back(plain_write_seconds(dir + ".plain", bytes));
        return median(s);
      }();
      std::printf("  %-24s %10s %12s %10s\n", "", "blocks", "complete", "MB/s");
      std::printf("  %-24s %10s %10.0f ms %10.0f   (one file, sequential, fsync)\n", "plain write", "-",
                  1e3 * plain, bytes / 1e6 / plain);
      for (const std::string mode : {"disabled", "async", "async_with_pinned_mem"}) {
        config::CheckpointSection cfg;
        cfg.async_mode = mode;
        cfg.keep_latest_k = 1;
        checkpoint::CheckpointManager manager(cfg, dir, st);
        std::vector<double> blocking, total;
        for (int64_t k = 0; k < repeats; ++k) {
          manager.save(k + 1, /*model_only=*/!with_optimizer);
          manager.close();
          blocking.push_back(manager.last_report()->blocking_seconds);
          total.push_back(manager.last_report()->total_seconds);
        }
        std::printf("  %-24s %7.0f ms %10.0f ms %10.0f   (%.2fx the plain write's time to complete)\n",
                    (mode == "disabled" ? std::string("save, sync") : "save, " + mode).c_str(),
                    1e3 * median(blocking), 1e3 * median(total), bytes / 1e6 / median(total),
                    median(total) / plain);
      }
      // Load the last one back into the same layout (reads, CRC-32 checks,
      // copies into the live tensors).
      const std::vector<int64_t> saved = checkpoint::list_checkpoints(dir);
      std::vector<double> load;
      for (int64_t k = 0; k < repeats; ++k) {
        checkpoint::ShardedState targets = checkpoint::model_shards(st.model_parts, nullptr);
        if (with_optimizer) {
          auto m = checkpoint::optimizer_shards(*optimizer, targets);
          targets.insert(targets.end(), m.begin(), m.end());
        }
        const auto t0 = std::chrono::steady_clock::now();
        checkpoint::load_shards(checkpoint::open_checkpoint(dir + "/" + checkpoint::step_folder_name(saved.back())),
                                targets);
        load.push_back(seconds_since(t0));
      }
      std::printf("  %-24s %10s %10.0f ms %10.0f   (from the page cache: the files were just written)\n", "load",
                  "-", 1e3 * median(load), bytes / 1e6 / median(load));
      files::remove_all(dir);
    }
    return 0;
  });
}
