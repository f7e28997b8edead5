#pragma once
// What the multi-process checkpoint tests share: a folder every rank sees,
// the tiny job they train (6 steps, saving at 3 and 6) and a run's losses
// and gathered weights.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "../train/train_test_util.hpp"
#include "support/dist_test.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/train/trainer.hpp"
#include "titan/util/files.hpp"

namespace titan::testing::checkpoint_dist {

using titan::config::JobConfig;
using titan::train::Trainer;
using titan::train::TrainerOptions;

inline const titan::dist::ProcessGroup& world_group() { return *titan::testing::world().group(); }

// One folder every rank sees (a ScratchDir is per process): named after
// the job's port, made by rank 0, removed by it at the end.
class SharedDir {
 public:
  explicit SharedDir(const std::string& name) {
    const char* port = std::getenv("MASTER_PORT");
    path_ = titan::files::temp_dir() + "/titan_" + name + "_" + (port ? port : "0");
    if (titan::testing::world().rank() == 0) {
      titan::files::remove_all(path_);
      titan::files::make_directories(path_);
    }
    world_group().barrier();
  }
  ~SharedDir() {
    // Not a throwing barrier: a destructor that runs while a test's
    // exception unwinds must not replace that error with terminate().
    try {
      world_group().barrier();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "SharedDir: %s\n", e.what());
    }
    if (titan::testing::world().rank() == 0) titan::files::remove_all(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct TrainRun {
  std::vector<double> losses, grad_norms;
  std::map<std::string, at::Tensor> weights;  // gathered
  int64_t start_step = 0;
  titan::models::llama3::ModelArgs args;  // as the trainer resolved them
};

inline titan::models::llama3::ModelArgs model_for(const JobConfig& c, bool tied = false) {
  auto a = titan::testing::tiny_model();
  a.tie_word_embeddings = tied;
  if (c.training.tensor_parallel_degree > 1) a.n_heads = 8, a.n_kv_heads = 4;
  if (c.experimental.pipeline_parallel_degree > 1) a.n_layers = 4;
  return a;
}

inline TrainerOptions quiet(const JobConfig& c, bool tied = false) {
  TrainerOptions o;
  o.model_args = model_for(c, tied);
  o.console = false;
  o.handle_signals = false;
  o.peak_flops = 0;
  return o;
}

inline TrainRun train(const JobConfig& cfg, TrainerOptions o) {
  TrainRun run;
  o.on_step = [&](const titan::train::StepResult& r) {
    run.losses.push_back(r.loss);
    run.grad_norms.push_back(r.grad_norm);
  };
  Trainer t(cfg, o);
  run.start_step = t.step();
  run.args = t.model_args();
  t.train();
  run.weights = t.full_state_dict();
  return run;
}

inline TrainRun train(const JobConfig& cfg) { return train(cfg, quiet(cfg)); }

inline JobConfig base(const std::string& dump) {
  JobConfig c = titan::testing::tiny_config(dump, /*steps=*/6);
  c.training.batch_size = 2;
  c.training.mixed_precision_param = "float32";
  c.training.deterministic = true;
  c.checkpoint.enable_checkpoint = true;
  c.checkpoint.interval = 3;
  return c;
}

}  // namespace titan::testing::checkpoint_dist
