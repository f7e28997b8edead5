#pragma once
/// @file
/// @brief init_distributed(): rendezvous through a c10d TCPStore and the
/// default process group over every rank, with the backend that fits the
/// device (Gloo for CPU, NCCL for CUDA).

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "titan/dist/launch_env.hpp"
#include "titan/dist/process_group.hpp"

namespace titan::dist {

/// @brief How to start the distributed runtime.
struct InitOptions {
  /// "cpu", "cuda" or "auto" (CUDA when available, else CPU). On CUDA each
  /// rank uses GPU LOCAL_RANK.
  std::string device = "auto";
  /// Per-collective timeout: a peer that fails or stalls longer than this
  /// turns into an error on every other rank.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  /// How long ranks wait for each other at rendezvous (TITAN_RENDEZVOUS_TIMEOUT
  /// in seconds overrides it).
  std::chrono::milliseconds rendezvous_timeout{std::chrono::seconds(120)};
  /// The flight recorder (flight_recorder.hpp): the last N ops each rank
  /// keeps (0 = off), and the folder a rank writes PREFIX<rank>.json into
  /// when a collective fails, on a fatal signal or on SIGUSR1 ("" = kept
  /// in memory only).
  int64_t flight_recorder_entries = 0;
  std::string flight_recorder_folder;
  std::string flight_recorder_prefix = "rank_";
  /// [comm] mode = "fake_backend": this process plays rank `fake_rank` of
  /// `fake_world_size` (it must be launched alone), with no rendezvous and
  /// a fake backend (backend.hpp) behind every group.
  bool fake = false;
  int fake_rank = 0;
  int fake_world_size = 1;
  /// [comm] backend: "auto" (Gloo on CPU, NCCL on CUDA), "gloo" (also on
  /// CUDA: ProcessGroup stages P2P through pinned host memory) or "nccl".
  std::string backend = "auto";
  /// [comm] ranks_per_device: local ranks that share one GPU.
  int ranks_per_device = 1;
};

/// @brief Ends each backend with its orderly `shutdown()` (NCCL: flush its
/// operations, then destroy the communicators), newest first, and empties
/// the list. A backend whose shutdown throws is reported on stderr and the
/// rest are still shut down: the job is over and its results are saved.
void shutdown_backends(std::vector<c10::intrusive_ptr<c10d::Backend>>& backends);

/// @brief The job as this rank sees it, after init_distributed().
class World {
 public:
  /// `engine`: "gloo", "nccl" or "fake", the backend of every group.
  World(LaunchEnv env, c10::Device device, c10::intrusive_ptr<c10d::Store> store,
        std::chrono::milliseconds timeout, std::string engine);

  const LaunchEnv& env() const { return env_; }
  int rank() const { return env_.rank; }
  int size() const { return env_.world_size; }
  const c10::Device& device() const { return device_; }
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  /// True when this process plays one rank of the job and no group
  /// communicates ([comm] mode = "fake_backend").
  bool fake() const { return engine_ == "fake"; }
  /// The backend every group runs on: "gloo", "nccl" or "fake".
  const std::string& engine() const { return engine_; }
  /// The group of all ranks ("world").
  const std::shared_ptr<ProcessGroup>& group() const { return world_group_; }

  /// Creates a group of `global_ranks` (this rank must be one of them) named
  /// `name`; `name` must be unique in the job and used by every member.
  std::shared_ptr<ProcessGroup> new_group(const std::string& name, std::vector<int> global_ranks) const;

  /// Shuts down the NCCL backend of every group made so far (a no-op on
  /// CPU); dist::shutdown() calls it after its barrier.
  void shutdown_nccl_groups() const { shutdown_backends(nccl_backends_); }

 private:
  LaunchEnv env_;
  c10::Device device_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  std::string engine_;
  std::shared_ptr<ProcessGroup> world_group_;
  mutable std::map<std::string, int> group_counts_;
  // ProcessGroupNCCL's destructor, when shutdown() was not called first,
  // warns that destroy_process_group was never called and aborts the
  // communicator; a group dropped mid-run would do that too. So the World
  // keeps every NCCL backend alive until dist::shutdown() ends them.
  mutable std::vector<c10::intrusive_ptr<c10d::Backend>> nccl_backends_;
};

/// @brief Joins the job described by the environment (torchrun, Slurm, or a
/// world of one) and returns it. Calling it again returns the same World.
/// Bad environments and failed rendezvous throw titan::Error with one line.
const World& init_distributed(const InitOptions& options = {});

/// @brief The World made by init_distributed(); throws if there is none.
const World& world();

/// @brief True between init_distributed() and shutdown().
bool is_initialized();

/// @brief The CUDA device a rank uses: GPU LOCAL_RANK of the visible ones
/// (torchrun, `titan run`, Slurm with every GPU visible to each task), or
/// GPU 0 when the rank is alone on its node or Slurm left each task a single
/// visible GPU (--gpus-per-task). Throws a one-line titan::Error naming the
/// numbers when LOCAL_RANK is not a visible GPU, or when several ranks of a
/// node would share one GPU (NCCL refuses two ranks of a communicator on
/// one device: "Duplicate GPU detected"). With `ranks_per_device` > 1
/// ([comm] ranks_per_device) local ranks k·n .. k·n+n−1 share GPU k, and
/// the node may run that many times its GPUs.
c10::DeviceIndex cuda_device_for(const LaunchEnv& env, int visible_devices, int ranks_per_device = 1);

/// @brief The backend a job's groups run on: "fake" for a fake rank,
/// else [comm] backend `choice` on `device` ("auto": Gloo for the CPU,
/// NCCL for CUDA). Throws a one-line titan::Error for NCCL on the CPU, and
/// for NCCL with ranks sharing a GPU when the NCCL loaded
/// (`nccl_version`, e.g. 22809 for 2.28.9; 0 when absent) is older than
/// 2.30, the first to take two ranks of a communicator on one device.
std::string choose_engine(const std::string& choice, const c10::Device& device, int ranks_per_device, bool fake,
                          int nccl_version);

/// @brief `t` on the device the job's collectives run on (world().device()),
/// or `t` itself when it is there already or no job is initialised. For the
/// small host-side values that meet a collective — a gradient-norm partial
/// or float8 amaxes over FSDP's CPU-offloaded shards — since NCCL takes only
/// CUDA tensors (Gloo takes either, so a CPU job never copies).
at::Tensor to_comm_device(const at::Tensor& t);

/// @brief Leaves the job: a barrier (so no rank tears down sockets its peers
/// still use), then the NCCL groups' shutdown (torch's
/// destroy_process_group), then the groups and store are released. Safe to
/// call twice. Error paths never call it: they exit without waiting on peers.
void shutdown();

/// @brief Puts `message` on the FailureBoard for this rank, so that peers
/// stuck in a collective with it name it in their errors. `knock_on` marks a
/// failure caused by a peer's. On rank 0, which hosts the store, it then
/// waits (up to `linger`) until the peers have read it and reported too,
/// since the store dies with rank 0.
void report_failure(const std::string& message, bool knock_on = false,
                    std::chrono::milliseconds linger = std::chrono::seconds(5));

}  // namespace titan::dist
