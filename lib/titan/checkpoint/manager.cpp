// CheckpointManager: the save protocol (folder, rank files, completion by
// rank 0), its background variant, and resuming.
#include "titan/checkpoint/manager.hpp"

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/hf_folder.hpp"
#include "titan/checkpoint/hf_sharded_load.hpp"
#include "titan/checkpoint/hf_sharded_save.hpp"
#include "titan/data/base64.hpp"
#include "titan/data/dataloader.hpp"
#include "titan/util/files.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/dist/world.hpp"
#include "titan/metrics/format.hpp"
#include "titan/optim/adam_state.hpp"
#include "titan/optim/lr_schedule.hpp"
#include "titan/util/error.hpp"
#include "titan/util/measure.hpp"
#include "titan/util/internal_assert.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::checkpoint {

namespace {

namespace files = titan::files;
using titan::strprintf;


std::string store_key(int64_t seq, int rank) {
  return "titan/checkpoint/" + std::to_string(seq) + "/rank/" + std::to_string(rank);
}

std::string tensor_bytes(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel() * c.element_size()));
}

// The default generator of every device this process computes on: the CPU
// always, and the job's GPU when it has one.
std::vector<c10::Device> generator_devices(const c10::Device& device) {
  std::vector<c10::Device> devices = {c10::Device(c10::kCPU)};
  if (device.is_cuda()) devices.push_back(device);
  return devices;
}

// Keyed by the device's type, not its index ("cuda", not "cuda:3"): the
// state is already this rank's, and a job resumed under another launcher
// may give the rank another GPU index (Slurm's --gpus-per-task: every rank
// on cuda:0). Checkpoints written with the index are still read.
std::string rng_key(const c10::Device& d) { return c10::DeviceTypeName(d.type(), /*lower_case=*/true); }

nlohmann::json rng_state(const c10::Device& device) {
  nlohmann::json out = nlohmann::json::object();
  for (const c10::Device& d : generator_devices(device))
    out[rng_key(d)] = data::base64_encode(tensor_bytes(at::globalContext().defaultGenerator(d).get_state()));
  return out;
}

void restore_rng(const nlohmann::json& saved, const c10::Device& device) {
  for (const c10::Device& d : generator_devices(device)) {
    const std::string key = saved.contains(rng_key(d)) ? rng_key(d) : d.str();
    if (!saved.contains(key)) continue;
    const auto bytes = data::base64_decode(saved.at(key).get<std::string>());
    TITAN_CHECK(bytes.has_value(), "checkpoint: the saved RNG state of ", d.str(), " is not valid base64");
    at::Tensor t = at::empty({static_cast<int64_t>(bytes->size())}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(t.data_ptr(), bytes->data(), bytes->size());
    at::Generator g = at::globalContext().defaultGenerator(d);  // shares the default one
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(t);
  }
}

// Fault injection for the crash-safety tests: TITAN_FAULT_KILL_DURING_SAVE=N
// makes rank TITAN_FAULT_KILL_RANK (default 1) die by SIGKILL in the middle
// of step N's save (its file written, the folder not complete), as a node
// lost mid-save would.
void kill_if_fault_injected(int64_t step, int rank) {
  const char* at_step = std::getenv("TITAN_FAULT_KILL_DURING_SAVE");
  if (!at_step || std::to_string(step) != at_step) return;
  const char* which = std::getenv("TITAN_FAULT_KILL_RANK");
  if (rank != (which ? std::atoi(which) : 1)) return;
  std::fprintf(stderr, "titan: fault injection: rank %d killed during the save of step %lld\n", rank,
               static_cast<long long>(step));
  std::raise(SIGKILL);
}

// A checkpoint saved in another dtype than the job holds its parameters
// in ([training] dtype) loads cast; the resume line says so. "" when the
// dtypes agree.
std::string dtype_change_note(const CheckpointInfo& ckpt, const ShardedState& model) {
  if (model.empty()) return "";
  const auto name = [](at::ScalarType t) {
    return t == at::kFloat ? std::string("float32") : t == at::kBFloat16 ? std::string("bfloat16") : c10::toString(t);
  };
  std::map<std::string, SavedTensor> saved;
  try {
    saved = model_tensor_index(ckpt);
  } catch (const std::exception&) {
    return "";  // load_shards has read it: nothing to add
  }
  const auto it = saved.find(model.front().fqn);
  const at::ScalarType held = model.front().local.scalar_type();
  if (it == saved.end() || it->second.dtype == held) return "";
  return "; saved in " + name(it->second.dtype) + ", cast to this job's " + name(held);
}

}  // namespace

at::ScalarType export_dtype(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  throw Error("[checkpoint] export_dtype = \"" + name + "\" is not float32, bfloat16 or float16");
}

/// One save on this rank: what to write, and (rank 0) how to complete it.
struct CheckpointManager::Job {
  int64_t step = 0;
  int64_t seq = 0;
  bool model_only = false;
  std::string partial_dir, final_dir;
  ShardedState shards;       ///< CPU copies (async) or the live tensors (sync)
  /// The dtype a synchronous weights-only save casts each box to as it is
  /// written (an async save's staged copies are already cast).
  std::optional<at::ScalarType> cast;
  nlohmann::json rank_state;  ///< this rank's part of metadata.json
  nlohmann::json job_state;   ///< the same on every rank (rank 0's is written)
  std::chrono::steady_clock::time_point started;
  std::string error;  ///< "" = succeeded
  SaveReport report;
};

CheckpointManager::CheckpointManager(config::CheckpointSection cfg, std::string folder, TrainingState state,
                                     std::function<void(const std::string&)> log)
    : cfg_(std::move(cfg)), folder_(std::move(folder)), state_(std::move(state)), log_(std::move(log)) {
  TITAN_CHECK(cfg_.interval_type == "steps", "[checkpoint] interval_type = \"", cfg_.interval_type,
              "\" is not supported: titan saves every `interval` steps (interval_type = \"steps\")");
  TITAN_CHECK(cfg_.async_mode == "disabled" || cfg_.async_mode == "async" || cfg_.async_mode == "async_with_pinned_mem",
              "[checkpoint] async_mode = \"", cfg_.async_mode, "\" is not disabled, async or async_with_pinned_mem");
  (void)export_dtype(cfg_.export_dtype);
  async_ = cfg_.async_mode != "disabled";
  pinned_ = cfg_.async_mode == "async_with_pinned_mem";
  if (state_.group) {
    rank_ = state_.group->rank();
    world_ = state_.group->size();
  }
}

CheckpointManager::~CheckpointManager() {
  if (!worker_.joinable()) return;
  worker_.join();
  if (job_ && !job_->error.empty()) std::fprintf(stderr, "titan: background checkpoint save failed: %s\n", job_->error.c_str());
}

void CheckpointManager::print(const std::string& line) const {
  if (log_ && rank_ == 0) log_(line);
}

std::string CheckpointManager::wait_for_background() {
  if (!worker_.joinable()) return "";
  worker_.join();
  std::shared_ptr<Job> job = std::move(job_);
  if (!job->error.empty()) return "background save of step " + std::to_string(job->step) + " failed: " + job->error;
  last_report_ = job->report;
  print(strprintf("checkpoint: step %lld complete in %s (written in the background in %.2f s, about what a "
                  "synchronous save would have blocked)",
                  static_cast<long long>(job->step), job->final_dir.c_str(), job->report.total_seconds));
  return "";
}

void CheckpointManager::run_job(Job& job) {
  nlohmann::json mine;
  try {
    const RankFile f = write_rank_file(job.partial_dir, rank_, job.shards, job.cast);
    job.report.bytes = f.bytes;
    kill_if_fault_injected(job.step, rank_);
    mine = {{"file", f.to_json()}, {"state", job.rank_state}};
  } catch (const std::exception& e) {
    job.error = e.what();
    mine = {{"error", job.error}};
  }
  job.shards.clear();  // the staged copies are written: give the memory back now
  try {
    // Every rank hands rank 0 its file record through the job's store
    // (no collective: this may run on a background thread while the
    // training loop's collectives run on the main one).
    const bool distributed = world_ > 1;
    if (distributed && rank_ != 0) {
      const std::string text = mine.dump();
      dist::world().store()->set(store_key(job.seq, rank_), std::vector<uint8_t>(text.begin(), text.end()));
    }
    if (rank_ == 0) {
      std::vector<RankFile> rank_files;
      nlohmann::json state = job.job_state;
      nlohmann::json steps = nlohmann::json::object(), loaders = nlohmann::json::object(),
                     rng = nlohmann::json::object();
      std::string failed;
      for (int r = 0; r < world_; ++r) {
        nlohmann::json c = mine;
        if (r != 0) {
          const std::vector<uint8_t> bytes = dist::world().store()->get(store_key(job.seq, r));
          dist::world().store()->deleteKey(store_key(job.seq, r));
          c = nlohmann::json::parse(std::string(bytes.begin(), bytes.end()));
        }
        if (c.contains("error")) {
          if (failed.empty()) failed = "rank " + std::to_string(r) + ": " + c.at("error").get<std::string>();
          continue;
        }
        rank_files.push_back(RankFile::from_json(c.at("file")));
        const nlohmann::json& s = c.at("state");
        if (s.contains("optimizer_steps")) steps.update(s.at("optimizer_steps"));
        if (s.contains("dataloaders"))
          for (const auto& [dp, st] : s.at("dataloaders").items())
            if (!loaders.contains(dp)) loaders[dp] = st;
        if (s.contains("rng")) rng[std::to_string(r)] = s.at("rng");
      }
      TITAN_CHECK(failed.empty(), failed);
      if (!job.model_only) {
        state["optimizer"]["steps"] = steps;
        state["dataloader"]["ranks"] = loaders;
        state["rng"] = rng;
      }
      finalize_checkpoint(job.partial_dir, job.final_dir, job.step, rank_files, state);
      prune_checkpoints(folder_, cfg_.keep_latest_k, job.step);
    }
  } catch (const std::exception& e) {
    if (job.error.empty()) job.error = e.what();
  }
  job.report.total_seconds = seconds_since(job.started);
}

void CheckpointManager::save(int64_t step, bool model_only, at::ScalarType dtype) {
  const auto t0 = std::chrono::steady_clock::now();
  const dist::ProcessGroup* group = state_.group;
  auto job = std::make_shared<Job>();
  job->step = step;
  job->seq = save_count_++;
  job->model_only = model_only;
  job->final_dir = folder_ + "/" + step_folder_name(step);
  job->partial_dir = job->final_dir + ".partial";
  job->started = t0;

  // The previous background save must be complete (and good) everywhere,
  // and rank 0 makes a clean folder for this one, before any rank writes.
  std::string error = wait_for_background();
  if (rank_ == 0 && error.empty()) {
    try {
      TITAN_CHECK(files::make_directories(folder_) && files::is_directory(folder_), "checkpoint: cannot create the folder ",
                  folder_);
      files::remove_all(job->partial_dir);
      TITAN_CHECK(files::make_directories(job->partial_dir), "checkpoint: cannot create ", job->partial_dir,
                  " (is ", folder_, " writable?)");
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree_on_errors(group, error, "checkpoint save of step " + std::to_string(step));

  // What this rank holds, then a copy of it where the save runs behind the
  // training loop (which changes the live tensors at the next step).
  ShardedState shards = model_shards(state_.model_parts, state_.mesh);
  if (!model_only) {
    ShardedState moments = optimizer_shards(*state_.optimizer, shards);
    nlohmann::json steps = nlohmann::json::object();
    for (const TensorShard& s : shards)
      if (s.primary) steps[s.fqn] = optim::adam_state(*state_.optimizer, s.local).step;
    shards.insert(shards.end(), moments.begin(), moments.end());
    job->rank_state["optimizer_steps"] = steps;
    nlohmann::json loaders = nlohmann::json::object();
    for (const auto& [dp, loader] : state_.loaders) loaders[std::to_string(dp)] = loader->state_dict();
    job->rank_state["dataloaders"] = loaders;
    job->rank_state["rng"] = rng_state(state_.device);
  }
  {
    at::NoGradGuard no_grad;
    for (TensorShard& s : shards) {
      if (!s.primary || s.numel() == 0) continue;
      const at::ScalarType want = model_only ? dtype : s.local.scalar_type();
      if (!async_) {
        // Cast box by box as the file is written (write_rank_file), not
        // here: a GPU rank would hold a cast copy of all its shards at once.
        job->shards.push_back(s);
        continue;
      }
      TensorShard staged = s;
      if (pinned_) {
        // Reused between saves (the previous one is done with them): the
        // host copies of a CUDA job go to page-locked memory, which the
        // device copies into at full speed (and no allocation per save).
        // The copy is synchronous: the writer reads the buffer next.
        at::Tensor& buf = pinned_buffers_[s.fqn];
        if (!buf.defined() || buf.sizes() != s.local.sizes() || buf.scalar_type() != want)
          buf = at::empty(s.local.sizes(), at::TensorOptions().dtype(want).pinned_memory(s.local.is_cuda()));
        buf.copy_(s.local.detach());
        staged.local = buf;
      } else {
        staged.local = s.local.detach().to(at::kCPU, want, /*non_blocking=*/false, /*copy=*/true);
      }
      job->shards.push_back(std::move(staged));
    }
  }
  if (!async_ && model_only) job->cast = dtype;
  job->job_state = {{"content", model_only ? "model" : "full"},
                    {"train_state", {{"step", step}}},
                    {"parallel", state_.parallel},
                    {"config", state_.config_toml}};
  if (!model_only) {
    job->job_state["lr_scheduler"] = {{"last_step", state_.scheduler->last_step()}};
    job->job_state["dataloader"] = {{"dp_world", state_.dp_world}};
  } else {
    job->job_state["export_dtype"] = std::string(c10::toString(dtype));
  }
  job->report.step = step;
  job->report.dir = job->final_dir;
  job->report.async = async_;
  job->report.model_only = model_only;

  if (async_) {
    job->report.blocking_seconds = seconds_since(t0);
    job_ = job;
    worker_ = std::thread([this, job] { run_job(*job); });
    print(strprintf("checkpoint: step %lld staged in %.3f s (%s); writing %s in the background",
                    static_cast<long long>(step), job->report.blocking_seconds, cfg_.async_mode.c_str(),
                    job->final_dir.c_str()));
    return;
  }
  run_job(*job);
  agree_on_errors(group, job->error, "checkpoint save of step " + std::to_string(step));
  job->report.blocking_seconds = seconds_since(t0);
  last_report_ = job->report;
  print(strprintf("checkpoint: step %lld saved to %s in %.2f s (%s%s)", static_cast<long long>(step),
                  job->final_dir.c_str(), job->report.blocking_seconds, model_only ? "weights only, " : "",
                  model_only ? c10::toString(dtype) : "full state"));
}

void CheckpointManager::maybe_save(int64_t step, bool last) {
  // torchtitan's rule: never with load_only; after step 1 when asked, at
  // the last step, and every `interval` steps.
  if (cfg_.load_only) return;
  if (step % cfg_.interval != 0 && !last && !(step == 1 && cfg_.enable_first_step_checkpoint)) return;
  const bool model_only = last && cfg_.model_weights_only;
  if (model_only && cfg_.last_save_in_hf) return save_in_hf(step, export_dtype(cfg_.export_dtype));
  save(step, model_only, model_only ? export_dtype(cfg_.export_dtype) : at::kFloat);
}

void CheckpointManager::save_in_hf(int64_t step, at::ScalarType dtype) {
  TITAN_INTERNAL_ASSERT(state_.model_args, "a save in Hugging Face format needs the model args");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string final_dir = folder_ + "/" + step_folder_name(step), partial_dir = final_dir + ".partial";
  // Synchronous, as torchtitan's last save: the previous background save
  // first, then a clean folder that becomes step-N only when complete.
  std::string error = wait_for_background();
  if (rank_ == 0 && error.empty()) {
    try {
      files::remove_all(partial_dir);
      TITAN_CHECK(files::make_directories(partial_dir), "checkpoint: cannot create ", partial_dir, " (is ", folder_,
                  " writable?)");
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree_on_errors(state_.group, error, "checkpoint save of step " + std::to_string(step));
  save_hf_shards(partial_dir, model_shards(state_.model_parts, state_.mesh), *state_.model_args, dtype, state_.group);
  try {
    if (rank_ == 0) publish_folder(partial_dir, final_dir);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(state_.group, error, "checkpoint save of step " + std::to_string(step));
  SaveReport report;
  report.step = step;
  report.dir = final_dir;
  report.model_only = true;
  report.blocking_seconds = report.total_seconds = seconds_since(t0);
  last_report_ = report;
  print(strprintf("checkpoint: step %lld saved to %s in %.2f s (weights only, %s, as a Hugging Face folder: "
                  "transformers' from_pretrained or initial_load_in_hf reads it)",
                  static_cast<long long>(step), final_dir.c_str(), report.blocking_seconds, c10::toString(dtype)));
}

void CheckpointManager::close() { agree_on_errors(state_.group, wait_for_background(), "background checkpoint save"); }

std::optional<int64_t> CheckpointManager::load() {
  const dist::ProcessGroup* group = state_.group;
  std::optional<CheckpointInfo> ckpt;
  std::vector<int64_t> weights_only_after;  // newer steps passed over: weights only
  std::string error;
  try {
    const std::vector<int64_t> steps = list_checkpoints(folder_);
    if (cfg_.load_step >= 0) {
      const std::string dir = folder_ + "/" + step_folder_name(cfg_.load_step);
      TITAN_CHECK(std::find(steps.begin(), steps.end(), cfg_.load_step) != steps.end(),
                  "[checkpoint] load_step = ", cfg_.load_step, ": ", folder_, " has no complete checkpoint step-",
                  cfg_.load_step,
                  is_hf_folder(dir) ? " (that folder is a Hugging Face save: start from it with initial_load_path "
                                      "and initial_load_in_hf = true)"
                  : steps.empty()   ? " (it has none)"
                                    : "");
      ckpt = open_checkpoint(dir);
    } else {
      // The newest one training can continue from: a full checkpoint, or a
      // step-0 seed (weights only: the start of training).
      for (auto it = steps.rbegin(); it != steps.rend() && !ckpt; ++it) {
        CheckpointInfo c = open_checkpoint(folder_ + "/" + step_folder_name(*it));
        if (c.full_state() || c.step == 0) ckpt = std::move(c);
        else weights_only_after.insert(weights_only_after.begin(), *it);
      }
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(group, error, "checkpoint load");
  // The job's own checkpoints come first: a job that started from another
  // one and saved since resumes from its own (torchtitan's rule).
  if (!ckpt) return cfg_.initial_load_path.empty() ? std::nullopt : load_initial();
  const std::optional<int64_t> step = restore(*ckpt, !ckpt->full_state(), ckpt->dir);
  // A later weights-only save (a run's last one under last_save_model_only)
  // cannot be resumed from: say which, and that saving its step again
  // replaces it.
  if (!weights_only_after.empty()) {
    std::string names;
    for (int64_t s : weights_only_after) names += (names.empty() ? "" : ", ") + step_folder_name(s);
    print(strprintf("checkpoint: passed over %s: weights only ([checkpoint] last_save_model_only), no optimizer or "
                    "data state to continue from; if this run saves %s again, it replaces %s",
                    names.c_str(), weights_only_after.size() == 1 ? "that step" : "those steps",
                    weights_only_after.size() == 1 ? "it" : "them"));
  }
  return step;
}

std::optional<int64_t> CheckpointManager::load_initial() {
  const std::string& path = cfg_.initial_load_path;
  ShardedState targets = model_shards(state_.model_parts, state_.mesh);
  if (cfg_.initial_load_in_hf) {
    TITAN_INTERNAL_ASSERT(state_.model_args, "an initial load from a Hugging Face folder needs the model args");
    load_hf_shards(path, targets, *state_.model_args, state_.group);
    print(strprintf("checkpoint: loaded the weights of the Hugging Face folder %s (initial_load_path): training "
                    "starts at step 1",
                    path.c_str()));
    return 0;
  }
  // A step folder, or a checkpoint folder whose latest complete step is meant.
  std::optional<CheckpointInfo> ckpt;
  std::string error;
  try {
    if (files::is_regular_file(files::join(path, kMetadataFile))) {
      ckpt = open_checkpoint(path);
    } else {
      TITAN_CHECK(files::is_directory(path), "[checkpoint] initial_load_path = '", path, "' does not exist");
      const std::vector<int64_t> steps = list_checkpoints(path);
      TITAN_CHECK(!steps.empty(), "[checkpoint] initial_load_path = '", path,
                  "' is neither a complete checkpoint (it has no ", kMetadataFile,
                  ") nor a folder of them; a Hugging Face folder needs initial_load_in_hf = true");
      ckpt = open_checkpoint(files::join(path, step_folder_name(steps.back())));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(state_.group, error, "initial load");
  const int64_t step =
      restore(*ckpt, cfg_.initial_load_model_only || !ckpt->full_state(), ckpt->dir + " (initial_load_path)");
  return cfg_.initial_load_model_only ? 0 : step;
}

int64_t CheckpointManager::restore(const CheckpointInfo& ckpt, bool weights_only, const std::string& what) {
  const dist::ProcessGroup* group = state_.group;
  // [checkpoint] exclude_from_loading: the parts a resume leaves as they are.
  auto loads = [&](const char* part) {
    return std::find(cfg_.exclude_from_loading.begin(), cfg_.exclude_from_loading.end(), part) ==
           cfg_.exclude_from_loading.end();
  };
  std::string left_out;
  for (const std::string& part : cfg_.exclude_from_loading) left_out += (left_out.empty() ? "" : ", ") + part;
  left_out = left_out.empty() ? "" : "; not loaded (exclude_from_loading): " + left_out;
  const ShardedState model = model_shards(state_.model_parts, state_.mesh);
  ShardedState targets = loads("model") ? model : ShardedState{};
  if (!weights_only && loads("optimizer")) {
    ShardedState moments = optimizer_shards(*state_.optimizer, model);
    targets.insert(targets.end(), moments.begin(), moments.end());
  }
  load_shards(ckpt, targets, group);
  const std::string cast = loads("model") ? dtype_change_note(ckpt, model) : "";
  if (weights_only) {
    print(strprintf("checkpoint: loaded the weights of %s (weights only): training starts at step 1%s%s", what.c_str(),
                    cast.c_str(), left_out.c_str()));
    return ckpt.step;
  }

  const nlohmann::json& st = ckpt.metadata.at("state");
  std::string note, error;
  try {
    if (loads("optimizer")) {
      const nlohmann::json& steps = st.at("optimizer").at("steps");
      for (const TensorShard& p : model) {
        TITAN_CHECK(steps.contains(p.fqn), "checkpoint ", ckpt.dir, " has no optimizer step for ", p.fqn);
        optim::set_adam_step(*state_.optimizer, p.local, steps.at(p.fqn).get<int64_t>());
      }
    }
    if (loads("lr_scheduler")) state_.scheduler->set_last_step(st.at("lr_scheduler").at("last_step").get<int64_t>());
    if (loads("train_state")) *state_.step = st.at("train_state").at("step").get<int64_t>();
    // Data positions are per data-parallel rank: they carry over only to
    // the same number of data-parallel ranks (as torchtitan's loader).
    const int64_t saved_dp = st.at("dataloader").at("dp_world").get<int64_t>();
    const nlohmann::json& ranks = st.at("dataloader").at("ranks");
    if (!loads("dataloader")) {
      // the data streams start from the beginning
    } else if (saved_dp == state_.dp_world) {
      for (auto& [dp, loader] : state_.loaders) {
        TITAN_CHECK(ranks.contains(std::to_string(dp)), "checkpoint ", ckpt.dir,
                    " has no data position for data-parallel rank ", dp);
        try {
          loader->load_state_dict(ranks.at(std::to_string(dp)));
        } catch (const Error& e) {
          // A changed seq_len or dataset: the position means nothing here.
          // Say how to keep the rest of the checkpoint and start the data over.
          throw Error(std::string(e.what()) + " (resuming " + ckpt.dir +
                      "; --checkpoint.exclude_from_loading dataloader keeps the rest and starts the data over)");
        }
      }
    } else {
      note = strprintf("; saved with %lld data-parallel ranks, now %lld: the data streams start over",
                       static_cast<long long>(saved_dp), static_cast<long long>(state_.dp_world));
    }
    const nlohmann::json& rng = st.at("rng");
    if (loads("rng") && rng.contains(std::to_string(rank_)) && rng.size() == static_cast<size_t>(world_))
      restore_rng(rng.at(std::to_string(rank_)), state_.device);
  } catch (const nlohmann::json::exception& e) {
    error = "checkpoint " + ckpt.dir + ": " + kMetadataFile + " lacks part of the training state (" + e.what() + ")";
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(group, error, "checkpoint load");
  print(strprintf("checkpoint: resumed from %s (step %lld)%s%s%s", what.c_str(), static_cast<long long>(*state_.step),
                  cast.c_str(), note.c_str(), left_out.c_str()));
  return ckpt.step;
}

}  // namespace titan::checkpoint
