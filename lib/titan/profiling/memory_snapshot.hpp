#pragma once
/// @file
/// @brief Memory snapshots of training steps ([profiling]
/// enable_memory_snapshot): every profile_freq steps, per rank,
///
/// - a **memory timeline** of the step (all devices): the tensor bytes held
///   at the step's boundaries — start, after forward+backward, after
///   clipping, after the optimizer — split into parameters, gradients,
///   optimizer state, FSDP's gathered weights and the rest (activations and
///   temporaries), with the peak reached inside each phase; as JSON and as
///   an SVG chart, `<folder>/iteration_N/rank<r>_memory_timeline.{json,svg}`;
/// - on CUDA also the caching allocator's history as the pickle that
///   https://pytorch.org/memory_viz opens,
///   `<folder>/iteration_N/rank<r>_memory_snapshot.pickle` (torchtitan's
///   file), and one more in `iteration_N_exit/` when a step runs out of memory.
///
/// CPU tensor bytes come from metrics/tensor_memory.hpp's counting
/// allocator, which the recorder switches on at construction (before the
/// model is built, so that every tensor of the run is counted).

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace titan::profiling {

/// @brief What one boundary of a step saw.
struct MemoryMark {
  std::string phase;            ///< "step start", "forward + backward", "clip", "optimizer"
  int64_t parameters = 0;       ///< bytes of the tensors the optimizer steps (this rank's shards)
  int64_t gradients = 0;        ///< bytes of their gradients
  int64_t optimizer_state = 0;  ///< bytes of the optimizer's per-parameter tensors
  int64_t fsdp_gathered = 0;    ///< FSDP's unsharded weights alive
  int64_t total = 0;            ///< all tensor bytes on the device
  int64_t peak = 0;             ///< the most held at once since the previous mark
  /// Activations, temporaries and anything else: total minus the named parts.
  int64_t other() const { return total - parameters - gradients - optimizer_state - fsdp_gathered; }
};

/// @brief Records memory marks of the steps the schedule picks and writes
/// them (and CUDA snapshots) out.
class MemoryRecorder {
 public:
  /// `freq`: a snapshot every freq steps (steps freq, 2·freq, ...).
  /// Starts CPU counting, or CUDA's allocator history on a GPU.
  MemoryRecorder(int64_t freq, std::string folder, int rank, c10::Device device,
                 std::function<void(const std::string&)> log = {});
  ~MemoryRecorder();

  /// Whether step `step` is recorded.
  bool records(int64_t step) const { return step % freq_ == 0; }
  /// A mark of the current step (no-op unless records(step)); the tensors
  /// are the trained parameters, and `optimizer` (may be null) their state.
  void mark(int64_t step, const std::string& phase, const std::vector<at::Tensor>& params,
            torch::optim::Optimizer* optimizer);
  /// After the step: writes its timeline (and CUDA snapshot) if recorded.
  void step_end(int64_t step);
  /// After a failed step (e.g. out of memory): writes what it has to
  /// `iteration_<step>_exit/` (and a CUDA snapshot), then the caller rethrows.
  void on_failure(int64_t step);

  /// The marks of the last recorded step.
  const std::vector<MemoryMark>& marks() const { return marks_; }
  /// The files written so far.
  const std::vector<std::string>& files() const { return files_; }

 private:
  void write(int64_t step, const std::string& dir_name);

  int64_t freq_;
  std::string folder_;
  int rank_;
  c10::Device device_;
  std::function<void(const std::string&)> log_;
  std::vector<MemoryMark> marks_;
  int64_t marks_step_ = -1;
  std::vector<std::string> files_;
};

/// @brief The marks as an SVG chart: one stacked bar per mark (parameters,
/// gradients, optimizer state, FSDP gathered, other) with the phase's peak
/// drawn as a line above it.
std::string render_memory_svg(const std::vector<MemoryMark>& marks, const std::string& title);

/// @brief The marks as JSON (bytes).
nlohmann::json memory_marks_json(const std::vector<MemoryMark>& marks);

namespace detail {
/// @brief The `stacks` the CUDA allocator's history records with, from the
/// value of TITAN_MEMORY_SNAPSHOT_CPP_STACKS (null when unset).
///
/// "python" by default: in titan's process there is no Python interpreter,
/// so that records no frames at all, only each event's action, size,
/// address, stream and time, which is what the timeline and memory_viz's
/// allocation view need. "all" (the variable set to 1, true or yes) also
/// unwinds the C++ stack at every allocation and free; the unwinding slows
/// every step, and symbolising tens of thousands of stacks when the
/// snapshot is taken can take minutes, which a short GPU session cannot
/// spare.
std::string cuda_history_stacks(const char* cpp_stacks_env);
#ifdef TITAN_HAS_CUDA
/// Starts the caching allocator's history (memory_snapshot_cuda.cpp) with
/// `stacks` ("python" or "all": cuda_history_stacks).
void cuda_start_memory_history(const std::string& stacks);
/// The history as memory_viz's pickle.
std::string cuda_memory_snapshot_pickle();
#endif
}  // namespace detail

}  // namespace titan::profiling
