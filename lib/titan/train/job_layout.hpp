#pragma once
/// @file
/// @brief What a job's config makes of its ranks, worked out and checked
/// before any of them starts: the parallel layout, the batches, the model's
/// shape and every parallelism's options. The trainer builds on it, and
/// `titan train --nproc N` runs it once in the launcher, so that a bad
/// config is one line from one process rather than the same line from
/// every rank.

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>

#include "titan/config/job_config.hpp"
#include "titan/dist/launch_env.hpp"
#include "titan/models/llama3/job_layout.hpp"

namespace titan::train {

/// @brief A job's layout on its world, as the trainer will build it
/// (models/llama3/job_layout.hpp: what estimate and verify take too).
using JobLayout = models::llama3::JobLayout;

/// @brief The layout of `cfg` on `world_size` ranks computing on `device`
/// (`model_args`: a test's model instead of [model] flavor's;
/// `batch_dp_degree`: the data-parallel degree the batches are cut for,
/// when not the layout's own, as a single-process reference reads a
/// parallel job's batches). Throws titan::Error, one line, for anything
/// the config, the world size or the device cannot do: an unsupported
/// key, degrees that do not multiply to the world, batches that do not
/// divide, a layout a parallelism refuses (models::llama3::plan_layout,
/// after the config's keys and a seed checkpoint's single process).
JobLayout plan_job_layout(const config::JobConfig& cfg, int64_t world_size, c10::Device device,
                          const std::optional<models::llama3::ModelArgs>& model_args = std::nullopt,
                          std::optional<int64_t> batch_dp_degree = std::nullopt);

/// @brief Where this process sits in its job: `launched` (the launcher's
/// word, dist::read_launch_env()), or, with [comm] mode = "fake_backend",
/// rank [comm] fake_rank of [comm] fake_world_size (launched alone, else a
/// one-line titan::Error).
dist::LaunchEnv job_launch_env(const config::JobConfig& cfg, const dist::LaunchEnv& launched);

/// @brief True when `cfg` plays one rank of its job ([comm] mode =
/// "fake_backend").
bool plays_fake_rank(const config::JobConfig& cfg);

/// @brief plan_job_layout for a job about to start `world_size` local ranks
/// (`titan train` / `titan verify --nproc N`, in their launcher): on the
/// device local rank 0 would pick. A fake rank's job starts one process
/// (`world_size` must be 1) and is planned on [comm] fake_world_size.
/// Throws as plan_job_layout does; returns the layout.
JobLayout check_job_before_launch(const config::JobConfig& cfg, int world_size);

}  // namespace titan::train
