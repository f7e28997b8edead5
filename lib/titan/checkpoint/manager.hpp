#pragma once
/// @file
/// @brief CheckpointManager: when to save, what a save holds, resuming from
/// the latest complete checkpoint, and saving in the background — the
/// trainer's side of distributed checkpointing (torchtitan's
/// CheckpointManager, configured by [checkpoint]).
///
/// A full checkpoint holds the model shards, the optimizer's moments (as
/// tensors, "optimizer.state.<fqn>.exp_avg" / "exp_avg_sq") and, in
/// metadata.json, the step, the LR schedule's position, every data-parallel
/// rank's data position, every rank's RNG state, the optimizer step counts,
/// the parallel layout and the config. A weights-only one (the last save
/// with model_weights_only, or a seed checkpoint) holds the model alone, in
/// export_dtype.
///
/// Async saves ("async", "async_with_pinned_mem") block only while the
/// state is copied to host memory; a background thread writes the files
/// and rank 0's completes the folder. The next save (or close()) waits for
/// the previous one, and any rank's failure in the background is an error
/// on every rank at that point, never a silent loss.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "titan/checkpoint/sharded_state.hpp"
#include "titan/config/job_config.hpp"

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}
namespace titan::data {
class DataLoader;
}
namespace titan::dist {
class DeviceMesh;
class ProcessGroup;
}
namespace titan::optim {
class LRScheduler;
}
namespace titan::models::llama3 {
struct ModelArgs;
}

namespace titan::checkpoint {

struct CheckpointInfo;

/// @brief Where the training state lives (pointers into the trainer; all
/// must outlive the manager).
struct TrainingState {
  std::vector<torch::nn::Module*> model_parts;  ///< the model, or this rank's pipeline stages
  const dist::DeviceMesh* mesh = nullptr;       ///< the job's mesh; null on one process
  /// All ranks of the job (its world group); null on one process, even
  /// under a launcher (a single-process reference does not join the job).
  const dist::ProcessGroup* group = nullptr;
  c10::Device device{c10::kCPU};                ///< where the job computes (its RNG is saved too)
  torch::optim::Optimizer* optimizer = nullptr;
  optim::LRScheduler* scheduler = nullptr;
  /// The data loaders this process reads, with their data-parallel ranks
  /// (one; several for a single-process reference of N ranks).
  std::vector<std::pair<int64_t, data::DataLoader*>> loaders;
  int64_t dp_world = 1;   ///< data-parallel ranks of the job (the loaders' dp_world)
  int64_t* step = nullptr;  ///< steps completed
  /// The model's args: a Hugging Face initial load checks its head counts
  /// (the q/k permutation depends on them) and a Hugging Face save writes
  /// them as config.json. Needed only with initial_load_in_hf or last_save_in_hf.
  const models::llama3::ModelArgs* model_args = nullptr;
  nlohmann::json parallel;  ///< the degrees, for the record and for messages
  std::string config_toml;  ///< the effective config, for the record
};

/// @brief What a finished save measured.
struct SaveReport {
  int64_t step = 0;
  std::string dir;
  bool async = false;
  bool model_only = false;
  double blocking_seconds = 0;  ///< time the training loop waited
  double total_seconds = 0;     ///< until the folder was complete (rank 0) / this rank's file written
  uint64_t bytes = 0;           ///< this rank's file
};

/// @brief Saves and restores a training run as [checkpoint] says.
class CheckpointManager {
 public:
  /// `folder` = [job] dump_folder / [checkpoint] folder. `log` prints a
  /// line (rank 0's console); may be empty.
  CheckpointManager(config::CheckpointSection cfg, std::string folder, TrainingState state,
                    std::function<void(const std::string&)> log = {});
  /// Waits for a background save still running (errors are logged, not
  /// thrown: call close() to see them).
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  const std::string& folder() const { return folder_; }

  /// @brief Resumes: loads [checkpoint] load_step, or else the latest
  /// complete full checkpoint in folder() (weights-only ones are skipped,
  /// except a step-0 seed), into the training state, resharding to the
  /// current layout. When folder() has none, starts from
  /// [checkpoint] initial_load_path if set: a checkpoint step folder (or a
  /// folder of them: the latest), its weights alone unless
  /// initial_load_model_only is false; or with initial_load_in_hf a
  /// Hugging Face folder (load_hf_shards). Every load reads only the rows
  /// this rank holds. Returns the step loaded (0 for an initial load of
  /// weights), or nullopt when nothing was loaded (a fresh start).
  /// Collective. A missing load_step, a bad or mismatching checkpoint is a
  /// titan::Error on every rank.
  std::optional<int64_t> load();

  /// @brief Called after each step: saves when `step` is a multiple of
  /// [checkpoint] interval or `last` (the final step; weights only in
  /// export_dtype with model_weights_only, as a Hugging Face folder
  /// step-N with last_save_in_hf, each rank writing its rows). Collective.
  void maybe_save(int64_t step, bool last);

  /// @brief Saves now (collective): the full state, or the model alone in
  /// `dtype` with `model_only`.
  void save(int64_t step, bool model_only = false, at::ScalarType dtype = at::kFloat);

  /// @brief Waits for the background save and makes any rank's failure of
  /// it an error on every rank. Collective; call once at the end of training.
  void close();

  /// @brief The last completed save's report on this rank (for benches, logs).
  const std::optional<SaveReport>& last_report() const { return last_report_; }

 private:
  struct Job;
  std::optional<int64_t> load_initial();
  void save_in_hf(int64_t step, at::ScalarType dtype);
  int64_t restore(const CheckpointInfo& ckpt, bool weights_only, const std::string& what);
  std::string wait_for_background();
  void run_job(Job& job);
  void print(const std::string& line) const;

  config::CheckpointSection cfg_;
  std::string folder_;
  TrainingState state_;
  std::function<void(const std::string&)> log_;
  bool async_ = false, pinned_ = false;
  int rank_ = 0, world_ = 1;
  int64_t save_count_ = 0;
  std::thread worker_;
  std::shared_ptr<Job> job_;  ///< the save in the background, if any
  std::map<std::string, at::Tensor> pinned_buffers_;  ///< async_with_pinned_mem's reused host copies
  std::optional<SaveReport> last_report_;
};

/// @brief The dtype [checkpoint] export_dtype names ("float32", "bfloat16", "float16").
at::ScalarType export_dtype(const std::string& name);

}  // namespace titan::checkpoint
