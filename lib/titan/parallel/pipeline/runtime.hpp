#pragma once
/// @file
/// @brief PipelineRuntime: runs one rank's action list of a schedule
/// (schedule.hpp) over its local stages (stage.hpp), moving activations
/// forward and gradients backward with send/recv over the pipeline group,
/// and records when each action ran. (torch's pipelining calls this object
/// the schedule, PipelineScheduleSingle / Multi; here the schedule is the
/// action lists, data, and this is what runs them.)

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "titan/parallel/pipeline/microbatch.hpp"
#include "titan/parallel/pipeline/schedule.hpp"
#include "titan/parallel/pipeline/stage.hpp"

namespace titan::dist {
class ProcessGroup;
}

namespace titan::pp {

/// @brief When one action ran on one rank, in microseconds from the step's
/// start on that rank (all ranks leave a barrier at their 0).
struct PipelineEvent {
  int rank = 0;
  Action action;
  double start_us = 0, end_us = 0;
};

/// @brief Knobs of the runtime.
struct RuntimeOptions {
  /// Record every action's interval (a barrier over the pipeline group
  /// starts each step so that the ranks' clocks share a zero).
  bool record_events = false;
  /// Measure the step's peak tensor memory above what was live at its
  /// start (the activations the schedule keeps), on the stages' device.
  bool measure_memory = false;
  /// Called before each action (tests inject failures here).
  std::function<void(const Action&)> before_action;
  /// Every rank's compute actions (F, B, I, W; [pipeline rank] -> list) to
  /// run instead of compute_actions(spec): a hand-written order (lab 05) or
  /// one from another generator. Empty = the spec's schedule. The
  /// constructor checks the lists with simulate() (every action on its
  /// rank, every micro-batch through every stage once, no deadlock; a
  /// one-line titan::Error otherwise) and adds the sends and receives with
  /// add_communication(). All ranks must be given the same lists.
  std::vector<RankActions> compute_actions;
};

/// @brief What one step measured on this rank.
struct PipelineStepResult {
  /// loss_sum / micro-batches: the mean of the micro-batches' losses as
  /// the last stage's loss_fn returns them (with ops::cross_entropy, each a
  /// mean: the step's mean loss when the micro-batches hold equally many
  /// counted targets; with the trainer's summing loss, a sum per
  /// micro-batch, so read loss_sum there). From the last stage, sent to
  /// every rank of the pipeline group.
  double loss = 0;
  /// The micro-batches' losses added up, unscaled: with a stage loss that
  /// sums over targets (the trainer's), the step's summed loss.
  double loss_sum = 0;
  /// Peak tensor bytes above the step's start (with measure_memory).
  int64_t peak_activation_bytes = 0;
};

/// @brief Runs a schedule on this rank's stages.
class PipelineRuntime {
 public:
  /// `stages`: this rank's stages (those spec.stages_of_rank(pp rank) names,
  /// any order). `pp_group` spans the pipeline ranks, group rank = pipeline
  /// rank (null with pp = 1).
  PipelineRuntime(ScheduleSpec spec, std::vector<std::shared_ptr<PipelineStage>> stages,
                   std::shared_ptr<dist::ProcessGroup> pp_group, RuntimeOptions options = {});

  /// One step's forwards and backwards: `batch` (the same on every rank of
  /// the pipeline) is cut by split_microbatches into spec.microbatches
  /// micro-batches along the batch — the first stage reads their inputs,
  /// the last their labels, every stage their doc_start —; each
  /// micro-batch's loss is multiplied by `loss_scale` before backward
  /// (none given: 1/m, so that the gradients are those of the mean of the
  /// micro-batches' mean losses — the batch's mean loss when they hold
  /// equally many targets, which hidden document-boundary targets can
  /// change; the trainer's stages sum their targets' losses instead and
  /// give one over the global batch's count, which makes it exact).
  /// Gradients are accumulated into .grad. Collective over the pipeline group.
  PipelineStepResult step(const BatchInputs& batch, std::optional<double> loss_scale = std::nullopt);
  /// step() of a batch without document starts (causal attention).
  PipelineStepResult step(const at::Tensor& inputs, const at::Tensor& labels,
                          std::optional<double> loss_scale = std::nullopt) {
    return step(BatchInputs{inputs, labels, {}}, loss_scale);
  }

  /// Forward only, without gradients (validation): `batch` cut as step()
  /// cuts it, each micro-batch through every stage in the schedule's order
  /// (its forwards, sends and receives; nothing is kept for a backward).
  /// Returns every micro-batch's loss (the last stage's, unscaled: a mean
  /// with ops::cross_entropy, NaN for a micro-batch whose targets are all
  /// hidden; a sum with the trainer's loss), on every rank of the pipeline
  /// group. Collective over the pipeline group.
  std::vector<double> eval(const BatchInputs& batch);
  const ScheduleSpec& spec() const { return spec_; }
  /// This rank's actions, communication included.
  const RankActions& actions() const { return actions_; }
  /// The last step's events on this rank (with record_events).
  const std::vector<PipelineEvent>& events() const { return events_; }
  /// Every rank's events of the last step (collective over the pipeline group).
  std::vector<PipelineEvent> gather_events() const;
  int pp_rank() const { return rank_; }

 private:
  /// What travels between one step's actions on this rank (runtime.cpp).
  struct StepState;
  PipelineStepResult run(const BatchInputs& batch, std::optional<double> loss_scale, bool forward_only,
                         std::vector<double>* microbatch_losses);
  /// The communication actions [begin, end) of actions_, posted as one
  /// batch of sends and receives.
  void run_communication(size_t begin, size_t end, StepState& state);
  /// The events of the sends among actions_ [begin, end), posted from `start`.
  void record_communication_events(size_t begin, size_t end, double start, StepState& state);
  /// One forward, backward, input- or weight-backward action.
  void run_compute(const Action& a, StepState& state);
  PipelineStage& stage(int s);
  void agree_shapes();

  ScheduleSpec spec_;
  std::vector<std::shared_ptr<PipelineStage>> stages_;
  std::shared_ptr<dist::ProcessGroup> group_;
  RuntimeOptions options_;
  int rank_ = 0;
  RankActions actions_;
  std::vector<PipelineEvent> events_;
  bool shapes_agreed_ = false;
};

/// @brief Per-rank bubble of a step from its events: 1 − (time in F/B/I/W)
/// / (the step's span, from 0 to the last event of any rank).
std::vector<double> measured_bubble(const std::vector<PipelineEvent>& events, int pp);

}  // namespace titan::pp
