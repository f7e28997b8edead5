#include "titan/dist/world.hpp"

#include <ATen/Context.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <c10/util/Logging.h>

#include "titan/dist/backend.hpp"
#include "titan/dist/flight_recorder.hpp"
#include "titan/dist/heartbeat.hpp"
#include "titan/dist/peer_watch.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strings.hpp"

#ifdef TITAN_HAS_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace titan::dist {
namespace {

std::unique_ptr<World> g_world;
std::unique_ptr<Heartbeat> g_heartbeat;  ///< this rank's, on a job of more than one rank
std::unique_ptr<PeerWatch> g_peer_watch;  ///< after g_heartbeat: destroyed first
std::mutex g_mu;
bool g_clean_exit = false;


bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

c10::Device pick_device(const std::string& want, const LaunchEnv& env, int ranks_per_device) {
  bool cuda = at::hasCUDA();
  if (want == "cpu" || (want == "auto" && !cuda)) return c10::Device(c10::kCPU);
  TITAN_CHECK(want == "cuda" || want == "auto", "unknown device '", want, "' (expected cpu, cuda or auto)");
  TITAN_CHECK(cuda, "device 'cuda' requested but no CUDA device is available");
  return c10::Device(c10::kCUDA, cuda_device_for(env, static_cast<int>(at::getNumGPUs()), ranks_per_device));
}

c10::intrusive_ptr<c10d::Store> rendezvous(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  if (env.world_size == 1) return c10::make_intrusive<c10d::HashStore>();
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(env.master_port);
  // Under torchrun the elastic agent already serves a TCPStore on
  // MASTER_PORT and says so; then every rank, rank 0 too, is a client.
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_store = agent && std::string(agent) == "True";
  opts.isServer = env.rank == 0 && !agent_store;
  if (!agent_store) {
    opts.numWorkers = env.world_size;
    opts.waitWorkers = true;
  } else {
    opts.waitWorkers = false;
  }
  opts.timeout = timeout;
  // c10d logs each failed connection attempt with a backtrace; our own error
  // below says it in one line.
  int saved_level = FLAGS_caffe2_log_level;
  FLAGS_caffe2_log_level = 3;
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
    FLAGS_caffe2_log_level = saved_level;
    return store;
  } catch (const std::exception& e) {
    FLAGS_caffe2_log_level = saved_level;
    std::string what = first_line(e.what());
    if (env.rank == 0 && what.find("EADDRINUSE") != std::string::npos)
      throw Error("rank 0 cannot host the rendezvous store: port " + std::to_string(env.master_port) +
                  " on " + env.master_addr + " is already in use (set MASTER_PORT to a free port)");
    throw Error("rank " + std::to_string(env.rank) + " could not join the rendezvous at " +
                env.master_addr + ":" + std::to_string(env.master_port) + " within " +
                std::to_string(timeout.count() / 1000) + " s: " + what);
  }
}

void report_exit_without_shutdown() {
  if (!g_clean_exit && g_world)
    FailureBoard::report(g_world->store(), g_world->rank(), "exited before finishing (exit() called mid-run)");
}

// A Gloo backend for group `name` under store prefix `key`, connected on
// every member.
c10::intrusive_ptr<c10d::Backend> connect_gloo(const c10::intrusive_ptr<c10d::Store>& store, const LaunchEnv& env,
                                               std::chrono::milliseconds timeout, const std::string& name,
                                               const std::string& key, int group_rank, int n) {
  // Gloo's full-mesh connect over loopback fails now and then on one side
  // only: one rank gets "Connection closed by peer" while its peer believes
  // the pair is up, and a third rank waits on the failed one until the
  // timeout (seen in about 1 of 10 runs of the TP tests on a 2-core
  // machine, ~20 groups each). So every member reports how its connect
  // went through the store, and when any failed all of them drop the
  // attempt and connect again under a fresh prefix: no rank keeps a
  // half-connected group, and a rank's real failure still ends in one error
  // naming it.
  constexpr int kAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
        "titan/group/" + key + "/attempt" + std::to_string(attempt), store);
    c10::intrusive_ptr<c10d::Backend> backend;
    std::string error;
    try {
      backend = make_gloo_backend(prefixed, group_rank, n, timeout,
                                  is_loopback(env.master_addr) ? "127.0.0.1" : "");
    } catch (const std::exception& e) {
      error = first_line(e.what());
    }
    // Fault injection for the test of this retry: TITAN_FAULT_GLOO_CONNECT
    // = "NAME:R" makes group rank R of group NAME report a failed first
    // connect (its connect having succeeded: the one-sided case).
    if (const char* f = std::getenv("TITAN_FAULT_GLOO_CONNECT");
        f && attempt == 1 && error.empty() && std::string(f) == name + ":" + std::to_string(group_rank))
      error = "injected by TITAN_FAULT_GLOO_CONNECT";
    const std::string mine = error.empty() ? "ok" : error;
    prefixed->set("outcome/" + std::to_string(group_rank), std::vector<uint8_t>(mine.begin(), mine.end()));
    std::vector<std::string> keys;
    for (int r = 0; r < n; ++r) keys.push_back("outcome/" + std::to_string(r));
    try {
      // A member whose connect waits on a failed peer reports only when
      // its own connect times out: wait longer than that.
      prefixed->wait(keys, 2 * timeout + std::chrono::seconds(30));
    } catch (const std::exception& e) {
      throw Error("rank " + std::to_string(env.rank) + " could not create process group '" + name +
                  "': its members did not all report their connect within the timeout (" + first_line(e.what()) +
                  ")");
    }
    int failed = -1;
    std::string failure;
    for (int r = 0; r < n && failed < 0; ++r) {
      const std::vector<uint8_t> v = prefixed->get("outcome/" + std::to_string(r));
      const std::string outcome(v.begin(), v.end());
      if (outcome != "ok") failed = r, failure = outcome;
    }
    if (failed < 0) return backend;
    backend.reset();  // a half-connected context is never used
    if (attempt == kAttempts)
      throw Error("rank " + std::to_string(env.rank) + " could not create process group '" + name + "': group rank " +
                  std::to_string(failed) + ": " + failure + " (" + std::to_string(kAttempts) + " attempts)");
    if (group_rank == 0)
      std::fprintf(stderr, "[titan] process group '%s': group rank %d could not connect (%s); connecting again (%d of %d)\n",
                   name.c_str(), failed, failure.c_str(), attempt + 1, kAttempts);
  }
}

}  // namespace

World::World(LaunchEnv env, c10::Device device, c10::intrusive_ptr<c10d::Store> store,
             std::chrono::milliseconds timeout, std::string engine)
    : env_(std::move(env)), device_(device), store_(std::move(store)), timeout_(timeout), engine_(std::move(engine)) {
  std::vector<int> all(env_.world_size);
  for (int r = 0; r < env_.world_size; ++r) all[r] = r;
  world_group_ = new_group("world", all);
}

std::shared_ptr<ProcessGroup> World::new_group(const std::string& name, std::vector<int> global_ranks) const {
  int group_rank = -1;
  for (size_t i = 0; i < global_ranks.size(); ++i)
    if (global_ranks[i] == env_.rank) group_rank = static_cast<int>(i);
  TITAN_CHECK(group_rank >= 0, "rank ", env_.rank, " is not a member of group '", name, "'");
  // The store prefix must be the same on every member and differ between
  // groups: the name, the member list and how often this exact group was made.
  std::string key = name + ":";
  for (int r : global_ranks) key += std::to_string(r) + ",";
  key += "#" + std::to_string(group_counts_[key]++);
  const int n = static_cast<int>(global_ranks.size());
  c10::intrusive_ptr<c10d::Backend> backend;
  if (engine_ == "fake") {
    backend = make_fake_backend(group_rank, n);
  } else if (engine_ == "nccl") {
    // NCCL connects lazily, at the first collective: nothing to agree on here.
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("titan/group/" + key, store_);
    try {
      backend = make_nccl_backend(prefixed, group_rank, n, timeout_, device_);
      nccl_backends_.push_back(backend);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error("rank " + std::to_string(env_.rank) + " could not create process group '" + name +
                  "': " + first_line(e.what()));
    }
  } else {
    backend = connect_gloo(store_, env_, timeout_, name, key, group_rank, n);
  }
  return std::make_shared<ProcessGroup>(name, std::move(global_ranks), group_rank, std::move(backend),
                                        store_, timeout_);
}

const World& init_distributed(const InitOptions& options) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_world) return *g_world;
  LaunchEnv env = read_launch_env();
  if (options.fake) env = fake_launch_env(env, options.fake_rank, options.fake_world_size);
  auto rdzv_timeout = options.rendezvous_timeout;
  if (const char* s = std::getenv("TITAN_RENDEZVOUS_TIMEOUT"); s && *s)
    rdzv_timeout = std::chrono::milliseconds(static_cast<int64_t>(std::atof(s) * 1000));
  c10::Device device = pick_device(options.device, env, options.ranks_per_device);
  const std::string engine = choose_engine(options.backend, device, options.ranks_per_device, options.fake,
                                           nccl_version());
  // NCCL 2.30+ takes two ranks of a communicator on one GPU when asked
  // (experimental in NCCL; the user's own setting wins).
  if (engine == "nccl" && options.ranks_per_device > 1) setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", /*overwrite=*/0);
  FlightRecorder& recorder = FlightRecorder::instance();
  recorder.configure(options.flight_recorder_entries);
  if (options.flight_recorder_entries > 0 && !options.flight_recorder_folder.empty()) {
    recorder.set_dump_target(options.flight_recorder_folder, options.flight_recorder_prefix, env.rank,
                             env.world_size);
    recorder.install_signal_dumps();
  }
#ifdef TITAN_HAS_CUDA
  if (device.is_cuda()) c10::cuda::set_device(device.index());
#endif
  // A fake rank meets nobody: its store is its own.
  c10::intrusive_ptr<c10d::Store> store;
  if (options.fake) store = c10::make_intrusive<c10d::HashStore>();
  else store = rendezvous(env, rdzv_timeout);
  // Beats from the rendezvous on, so that a peer dying while the groups
  // connect is named too. One rank (or a fake one) has nobody to tell.
  if (env.world_size > 1 && !options.fake) {
    g_heartbeat = std::make_unique<Heartbeat>(store, env.rank);
    detail::set_current_heartbeat(g_heartbeat.get());
  }
  g_clean_exit = false;
  g_world = std::make_unique<World>(env, device, store, options.timeout, engine);
  // On NCCL a dead peer fails no collective on the host: the watch of the
  // next rank's heartbeat names it before the watchdog's timeout does.
  if (g_heartbeat && peer_watch_wanted(engine == "nccl"))
    g_peer_watch = std::make_unique<PeerWatch>(*g_heartbeat, env.rank, env.world_size,
                                               peer_watch_window(options.timeout, g_heartbeat->interval()));
  static bool registered = false;
  if (!registered) {
    std::atexit(report_exit_without_shutdown);
    registered = true;
  }
  return *g_world;
}

const World& world() {
  TITAN_CHECK(g_world != nullptr, "titan::dist::init_distributed() has not been called");
  return *g_world;
}

bool is_initialized() { return g_world != nullptr; }

c10::DeviceIndex cuda_device_for(const LaunchEnv& env, int visible_devices, int ranks_per_device) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string shown = std::string("(CUDA_VISIBLE_DEVICES='") + (visible ? visible : "") + "')";
  TITAN_CHECK(ranks_per_device >= 1, "[comm] ranks_per_device = ", ranks_per_device, " must be >= 1");
  // Slurm's --gpus-per-task leaves each task its own single GPU; titan run
  // and torchrun leave every rank all of the node's.
  if (visible_devices == 1 && (env.local_world_size == 1 || env.source == "slurm")) return 0;
  const int share = (env.local_world_size + visible_devices - 1) / std::max(visible_devices, 1);
  TITAN_CHECK(env.local_world_size <= visible_devices * ranks_per_device, env.local_world_size,
              " ranks on this node and ", visible_devices, " visible GPU", visible_devices == 1 ? "" : "s", " ", shown,
              ranks_per_device > 1 ? " shared by [comm] ranks_per_device = " + std::to_string(ranks_per_device) : "",
              ": NCCL needs a GPU per rank (run as many ranks per node as GPUs, let ranks share them with [comm] "
              "ranks_per_device = ", share, ", or --training.device cpu to emulate the ranks)");
  const int gpu = env.local_rank / ranks_per_device;
  TITAN_CHECK(env.local_rank >= 0 && gpu < visible_devices, "LOCAL_RANK ", env.local_rank, " has no GPU: ",
              visible_devices, " visible ", shown);
  return static_cast<c10::DeviceIndex>(gpu);
}

std::string choose_engine(const std::string& choice, const c10::Device& device, int ranks_per_device, bool fake,
                          int nccl_version) {
  if (fake) return "fake";
  TITAN_CHECK(choice == "auto" || choice == "gloo" || choice == "nccl", "[comm] backend = \"", choice,
              "\" is not one of auto, gloo, nccl");
  TITAN_CHECK(choice != "nccl" || device.is_cuda(), "[comm] backend = \"nccl\" needs CUDA tensors, but the job ",
              "trains on ", device.str(), " (use --comm.backend gloo or auto, or --training.device cuda)");
  const std::string engine = choice == "auto" ? (device.is_cuda() ? "nccl" : "gloo") : choice;
  constexpr int kFirstMultiRankNccl = 23000;  // NCCL 2.30.0: NCCL_MULTI_RANK_GPU_ENABLE
  if (engine == "nccl" && ranks_per_device > 1) {
    const std::string found = nccl_version > 0 ? std::to_string(nccl_version / 10000) + "." +
                                                     std::to_string(nccl_version / 100 % 100) + "." +
                                                     std::to_string(nccl_version % 100)
                                               : std::string("none");
    TITAN_CHECK(nccl_version >= kFirstMultiRankNccl, "[comm] ranks_per_device = ", ranks_per_device,
                " puts ranks of one NCCL communicator on one GPU, which NCCL takes from 2.30 on (found ", found,
                "): use --comm.backend gloo, or install nvidia-nccl-cu13>=2.30 into the venv");
  }
  return engine;
}

at::Tensor to_comm_device(const at::Tensor& t) {
  if (g_world == nullptr || t.device() == g_world->device()) return t;
  return t.to(g_world->device());
}

void shutdown() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_world) return;
  g_world->group()->barrier();
  g_clean_exit = true;
  // The watch first: a peer that finished its shutdown stops beating.
  g_peer_watch.reset();
  g_world->shutdown_nccl_groups();
  detail::set_current_heartbeat(nullptr);
  g_heartbeat.reset();
  g_world.reset();
}

void shutdown_backends(std::vector<c10::intrusive_ptr<c10d::Backend>>& backends) {
  for (auto it = backends.rbegin(); it != backends.rend(); ++it) {
    try {
      (*it)->shutdown();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[titan] warning: a %s group's shutdown failed: %s\n", (*it)->getBackendName().c_str(),
                   first_line(e.what()).c_str());
    }
  }
  backends.clear();
}

void report_failure(const std::string& message, bool knock_on, std::chrono::milliseconds linger) {
  g_clean_exit = true;  // reported here; the exit handler need not repeat it
  if (!g_world) return;
  FailureBoard::report(g_world->store(), g_world->rank(), message, knock_on);
  if (g_world->rank() != 0 || g_world->size() == 1 || g_world->fake()) return;  // no peer will report
  std::vector<int> peers;
  for (int r = 1; r < g_world->size(); ++r) peers.push_back(r);
  auto deadline = std::chrono::steady_clock::now() + linger;
  while (std::chrono::steady_clock::now() < deadline && !FailureBoard::all_reported(g_world->store(), peers))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

}  // namespace titan::dist
