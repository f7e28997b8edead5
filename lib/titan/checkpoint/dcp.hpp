#pragma once
/// @file
/// @brief titan's distributed checkpoint format: one folder per step,
/// each rank's shards in a safetensors file laid out as
/// torch.distributed.checkpoint's Hugging Face storage (so that Python's
/// `dcp.load(..., storage_reader=HuggingFaceStorageReader(dir))` reads it
/// and reshards it), plus one metadata.json for everything else.
///
/// ```
/// <folder>/step-40/
///   rank-00000.safetensors   this rank's boxes; __metadata__ DCP_SHARDING_INFO
///   rank-00001.safetensors     = {fqn: {"saved_offsets": [...]}}
///   ...
///   metadata.json            format version, step, per-file bytes + CRC-32,
///                            the tensor index (shape, dtype, which file holds
///                            which box), train state, LR schedule, data
///                            positions, RNG states, parallel layout, config
/// ```
///
/// Crash safety: a save writes into `step-N.partial/`, fsyncs every file,
/// writes metadata.json last, then renames the folder to `step-N` and
/// fsyncs the parent. Only folders named step-N that hold metadata.json
/// are checkpoints; a crash at any point leaves the previous ones intact.
///
/// Loading reshards: each rank reads, for every box it holds now, the
/// overlapping parts of the saved boxes, whatever layout saved them.

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/checkpoint/safetensors.hpp"
#include "titan/checkpoint/sharded_state.hpp"

namespace titan::dist {
class ProcessGroup;
}

namespace titan::checkpoint {

struct TensorStream;

/// Version of metadata.json's layout; loads refuse other versions.
inline constexpr int kFormatVersion = 1;
/// The file whose presence marks a complete checkpoint.
inline constexpr const char* kMetadataFile = "metadata.json";

/// @brief "step-N".
std::string step_folder_name(int64_t step);
/// @brief The name of rank `rank`'s tensor file ("rank-00003.safetensors").
std::string rank_file_name(int rank);

/// @brief What one rank wrote into a checkpoint folder.
struct RankFile {
  int rank = 0;
  std::string file;  ///< name inside the folder; empty when the rank saved no tensor
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
  /// fqn -> {"dtype", "shape" (global), "offsets", "lengths"} of the boxes in `file`.
  nlohmann::json tensors = nlohmann::json::object();

  nlohmann::json to_json() const;
  static RankFile from_json(const nlohmann::json& j);
};

/// @brief Writes the primary, non-empty boxes of `shards` (staged CPU
/// copies, or live tensors on any device) into `dir`/rank_file_name(rank),
/// fsync'ed, each box copied to the host (and cast to `dtype`, if given)
/// only when its turn comes: one box in host memory at a time. Throws
/// titan::Error naming the file on any write failure (disk full,
/// unwritable folder).
RankFile write_rank_file(const std::string& dir, int rank, const ShardedState& shards,
                         std::optional<at::ScalarType> dtype = std::nullopt);

/// @brief Completes a checkpoint: writes metadata.json into `partial_dir`
/// (the files of every rank, their tensor index and `state`), fsyncs it and
/// the folder, renames it to `final_dir` (replacing an older folder of that
/// name) and fsyncs the parent. Run by one rank once all RankFiles exist.
/// Throws titan::Error when two ranks saved overlapping boxes or a tensor's
/// boxes disagree on shape or dtype.
void finalize_checkpoint(const std::string& partial_dir, const std::string& final_dir, int64_t step,
                         const std::vector<RankFile>& files, const nlohmann::json& state);

/// @brief Makes the finished folder `partial_dir` the folder `final_dir`:
/// fsyncs it, renames it (an older `final_dir` moved aside first, then
/// removed) and fsyncs the parent. Throws titan::Error naming the folders.
void publish_folder(const std::string& partial_dir, const std::string& final_dir);

/// @brief The steps of the complete checkpoints under `folder`, ascending
/// (folders step-N with metadata.json; partial ones are ignored).
std::vector<int64_t> list_checkpoints(const std::string& folder);

/// @brief Removes all but the newest `keep` complete checkpoints under
/// `folder` (0 keeps all), except the newest full-state one (the last a run
/// can resume from, when weights-only saves came after it), and partial
/// folders older than `newest`. Each removal first deletes metadata.json,
/// so a removal cut short never leaves a folder that looks complete.
void prune_checkpoints(const std::string& folder, int64_t keep, int64_t newest);

/// @brief A checkpoint folder opened for loading.
struct CheckpointInfo {
  std::string dir;
  int64_t step = 0;
  nlohmann::json metadata;  ///< metadata.json as written
  /// The files' parsed headers (file name → header), filled by loads as they
  /// read them: a reader that loads tensor by tensor parses each file's
  /// header once, not once per tensor. Shared by copies of this info.
  std::shared_ptr<std::map<std::string, SafetensorsHeader>> headers =
      std::make_shared<std::map<std::string, SafetensorsHeader>>();
  /// Whether `fqn` is in the tensor index.
  bool has_tensor(const std::string& fqn) const;
  /// Whether it holds the whole training state (a run can resume from it),
  /// not the weights alone (state.content "full" rather than "model").
  bool full_state() const;
  /// The global shape `fqn` was saved with (throws titan::Error if absent).
  std::vector<int64_t> shape_of(const std::string& fqn) const;
};

/// @brief Opens `dir` (a step-N folder): reads and checks metadata.json.
/// Throws a one-line titan::Error for a missing folder or marker, bad JSON
/// or another format version.
CheckpointInfo open_checkpoint(const std::string& dir);

/// @brief Loads every shard of `targets` from `ckpt`, resharding: each
/// box is filled from the overlapping parts of the saved boxes (converted
/// to the target's dtype). Before anything is written, checks (in target
/// order, naming the first offender) that every tensor is in the
/// checkpoint with the same global shape, that the saved boxes cover each
/// target box, and that every file it reads has the recorded size and
/// CRC-32. With `group` (the job's world group), every rank learns of any
/// rank's failure and throws too, so none runs on with a half-loaded model.
/// `check_files` = false skips the size and CRC-32 checks, for a reader that
/// ran check_checkpoint_files once before loading tensor by tensor.
void load_shards(const CheckpointInfo& ckpt, ShardedState& targets, const dist::ProcessGroup* group = nullptr,
                 bool check_files = true);

/// @brief All ranks agree on an error: each passes its own ("" = none);
/// if any is non-empty every rank throws titan::Error — its own message,
/// or one naming the first failing rank. Collective over `group` (null: local).
void agree_on_errors(const dist::ProcessGroup* group, const std::string& my_error, const std::string& what);

/// @brief What a checkpoint holds of one tensor, from metadata.json alone.
struct SavedTensor {
  std::vector<int64_t> shape;  ///< global
  at::ScalarType dtype = at::kFloat;
};

/// @brief The model tensors of `ckpt` (names not starting with
/// "optimizer."), with shapes and dtypes, no data read; a tensor whose
/// saved boxes do not cover it is a one-line titan::Error.
std::map<std::string, SavedTensor> model_tensor_index(const CheckpointInfo& ckpt);

/// @brief Checks every file of `ckpt` against metadata.json (present, its
/// recorded size and CRC-32); titan::Error names the first that fails.
void check_checkpoint_files(const CheckpointInfo& ckpt);

/// @brief One whole model tensor of `ckpt` (`saved` from
/// model_tensor_index), assembled from its boxes, in its saved dtype on the
/// CPU. The files are not checked again (check_checkpoint_files first):
/// for reading a large checkpoint one tensor at a time.
at::Tensor read_model_tensor(const CheckpointInfo& ckpt, const std::string& fqn, const SavedTensor& saved);

/// @brief The whole model tensors (names not starting with "optimizer.")
/// of the checkpoint in `dir`, assembled from all boxes, in their saved
/// dtype on the CPU: the whole model in memory, for small models and
/// inspection (checkpoint_stream reads one tensor at a time).
std::map<std::string, at::Tensor> read_model_tensors(const std::string& dir);

/// @brief Writes `tensors` (whole tensors, torchtitan names) as a
/// weights-only checkpoint folder `dir` of one rank at `step` (e.g. step 0:
/// a seed checkpoint or a converted Hugging Face model), crash-safe as
/// any save. Existing `dir` is replaced.
void write_model_checkpoint(const std::string& dir, const std::map<std::string, at::Tensor>& tensors, int64_t step);

/// @brief write_model_checkpoint with each tensor read from `tensors` when
/// its turn comes and dropped after it is written: one tensor in memory
/// at a time (how `titan convert` writes a checkpoint of any size).
void write_model_checkpoint(const std::string& dir, const TensorStream& tensors, int64_t step);

}  // namespace titan::checkpoint
