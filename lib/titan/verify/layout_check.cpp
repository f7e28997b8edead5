#include "titan/verify/layout_check.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "titan/checkpoint/manager.hpp"
#include "titan/dist/comm_log.hpp"
#include "titan/dist/world.hpp"
#include "titan/metrics/format.hpp"
#include "titan/train/determinism.hpp"
#include "titan/train/trainer.hpp"
#include "titan/verify/gradient_fault.hpp"
#include "titan/verify/reference_trainer.hpp"
#include "titan/util/error.hpp"
#include "titan/util/files.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::verify {
namespace {

// CommLog step of what happens between steps (gathering the weights for
// the comparison), kept apart from the steps' own communication.
constexpr int64_t kBetweenSteps = -1;

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

// NaN compares false: a NaN difference must fail, not pass.
bool within(double value, double bound) { return value <= bound; }

train::TrainerOptions quiet_options() {
  train::TrainerOptions o;
  o.console = false;
  o.handle_signals = false;
  return o;
}

}  // namespace

int64_t LayoutCheckReport::first_failed_step() const {
  for (const LayoutCheckStep& s : steps)
    if (!s.passed) return s.step;
  return 0;
}

int64_t LayoutCheckReport::first_comm_difference_step() const {
  for (const LayoutCheckStep& s : steps)
    if (!s.comm_differences.empty()) return s.step;
  return 0;
}

bool step_within_bounds(const LayoutCheckStep& s, const LayoutCheckReport& r) {
  return within(s.loss_rel, r.rel_bound()) && within(s.grad_norm_rel, r.rel_bound()) &&
         within(s.val_loss_rel, r.rel_bound()) && (r.float8 || within(s.max_weight_diff, r.options.weight_tol));
}

std::string parameter_group(const std::string& name) {
  std::string base = name;
  for (const char* suffix : {".weight", ".bias"}) {
    const std::string s(suffix);
    if (base.size() > s.size() && base.compare(base.size() - s.size(), s.size(), s) == 0)
      base.resize(base.size() - s.size());
  }
  std::vector<std::string> parts;
  std::stringstream in(base);
  for (std::string p; std::getline(in, p, '.');) parts.push_back(p);
  if (parts.size() >= 3 && parts[0] == "layers") return parts[0] + "." + parts[1] + "." + parts[2];
  return parts.empty() ? name : parts[0];
}

config::JobConfig layout_check_config(config::JobConfig cfg, const LayoutCheckOptions& options) {
  TITAN_CHECK(options.steps >= 1, "titan verify: --steps must be at least 1, got ", options.steps);
  TITAN_CHECK(options.rel_tol > 0 && options.weight_tol > 0, "titan verify: the bounds must be positive, got --rtol ",
              options.rel_tol, " and --wtol ", options.weight_tol);
  TITAN_CHECK(options.resume_at >= 0 && options.resume_at < options.steps,
              "titan verify: --resume-at must be a step before the last (--steps ", options.steps, "), got ",
              options.resume_at);
  TITAN_CHECK(options.resume_at > 0 || !options.resume_as, "titan verify: --resume-as needs --resume-at");
  cfg.training.steps = options.steps;
  if (!options.flavor.empty()) cfg.model.flavor = options.flavor;
  // fp32 on both sides: one process runs without FSDP, so without its
  // mixed precision; the bounds are fp32 rounding's (pure bf16 weights too
  // are checked as fp32: the layout's arithmetic is the same).
  cfg.training.dtype = "float32";
  cfg.training.mixed_precision_param = "float32";
  cfg.training.mixed_precision_reduce = "float32";
  cfg.checkpoint.enable_checkpoint = false;
  cfg.profiling.enable_profiling = false;
  cfg.profiling.enable_memory_snapshot = false;
  cfg.metrics.enable_tensorboard = false;
  cfg.job.dump_folder += "/verify";
  return cfg;
}

void check_resume_layout(const train::JobLayout& saved, const train::JobLayout& resumed) {
  const auto same = [](const char* what, int64_t before, int64_t after) {
    TITAN_CHECK(before == after, "titan verify: --resume-as must keep the ", what, " (", before, " before, ", after,
                " after): the resumed run would not train the batches one process trains");
  };
  same("data-parallel degree", saved.dims.dp_degree(), resumed.dims.dp_degree());
  same("local batch", saved.batches.local_batch, resumed.batches.local_batch);
  same("global batch", saved.batches.global_batch, resumed.batches.global_batch);
  same("sequence length", saved.args.max_seq_len, resumed.args.max_seq_len);
}

namespace {

// The checkpointing of a run that is resumed: in the run's scratch folder,
// saved only when check_layout says, loaded only by the resumed run (at
// the step it saved). The config's async mode and exclusions stay: they
// are part of what is checked.
config::JobConfig with_resume_checkpoint(config::JobConfig cfg, int64_t load_step) {
  cfg.checkpoint.enable_checkpoint = true;
  cfg.checkpoint.folder = "checkpoint";
  cfg.checkpoint.load_step = load_step;
  cfg.checkpoint.load_only = false;
  cfg.checkpoint.create_seed_checkpoint = false;
  cfg.checkpoint.initial_load_path.clear();
  cfg.checkpoint.keep_latest_k = 0;
  return cfg;
}

}  // namespace

LayoutCheckReport check_layout(const config::JobConfig& job, const LayoutCheckOptions& options) {
  const config::JobConfig cfg = layout_check_config(job, options);
  const int64_t resume_at = options.resume_at;
  // Both runs' GEMMs in full fp32 on a GPU too: the bounds are fp32's.
  train::use_full_fp32_matmuls();
  LayoutCheckReport report;
  report.options = options;

  // The layout, on every rank. Its weights after each step, gathered whole
  // (collective), kept on rank 0 for the reference to meet.
  std::vector<train::StepResult> parallel_steps;
  std::map<int64_t, double> parallel_val_loss;
  std::vector<std::map<std::string, at::Tensor>> parallel_weights;
  std::map<int64_t, StepComm> comm;
  std::map<int64_t, ExpectedComm> expected;
  bool on_rank0 = true;
  auto& log = dist::CommLog::instance();
  // Steps [first, last] of `trainer` (its first step is the pipeline's
  // shape handshake, counted as such).
  const auto run_steps = [&](train::Trainer& trainer, int64_t first, int64_t last) {
    on_rank0 = trainer.rank() == 0;
    for (int64_t s = first; s <= last; ++s) {
      log.begin_step(s);
      parallel_steps.push_back(trainer.train_step());
      log.begin_step(kBetweenSteps);  // validation is not in the analytic count
      if (const auto v = trainer.validate_if_due()) parallel_val_loss[s] = v->loss;
      std::map<std::string, at::Tensor> w = trainer.full_state_dict();
      if (on_rank0) {
        for (auto& [name, t] : w) t = t.to(at::kCPU, at::kDouble);
        parallel_weights.push_back(std::move(w));
        comm[s] = measured_step_comm(s);
        expected[s] = expected_step_comm(trainer.layout(), /*first_step=*/s == first);
      }
    }
  };
  {
    config::JobConfig pc = cfg;
    pc.job.dump_folder += "/layout";
    train::TrainerOptions po = quiet_options();
    po.after_backward = gradient_fault_from_env();  // the tests' injected fault, if any
    if (resume_at > 0) {
      pc = with_resume_checkpoint(pc, -1);
      po.load_checkpoint = false;  // a fresh start, whatever an earlier check left
    }
    train::Trainer trainer(pc, po);
    const parallel::ParallelDims& dims = trainer.parallel_dims();
    report.layout = dims.describe();
    report.world_size = static_cast<int>(dims.world_size);
    report.emulated_ranks = dims.dp_degree();
    if (options.resume_as)
      check_resume_layout(trainer.layout(),  // the saving run's own reading of its config
                          train::plan_job_layout(layout_check_config(*options.resume_as, options), dims.world_size,
                                                 trainer.device()));
    run_steps(trainer, 1, resume_at > 0 ? resume_at : options.steps);
    if (resume_at > 0) {
      // An earlier check's checkpoints must not be the one resumed, nor
      // count against this one's.
      checkpoint::CheckpointManager& ckpt = *trainer.checkpointer();
      if (trainer.rank() == 0) files::remove_all(ckpt.folder());
      if (dims.world_size > 1) dist::world().group()->barrier();
      ckpt.save(resume_at);
      ckpt.close();  // an async save completes (or fails on every rank) here
      report.resume_save_mode = pc.checkpoint.async_mode == "disabled" ? "sync" : pc.checkpoint.async_mode;
    }
  }
  if (resume_at > 0) {
    config::JobConfig later = options.resume_as ? layout_check_config(*options.resume_as, options) : cfg;
    later.job.dump_folder = cfg.job.dump_folder + "/layout";
    later = with_resume_checkpoint(later, resume_at);
    train::TrainerOptions lo = quiet_options();
    lo.after_backward = gradient_fault_from_env();
    train::Trainer trainer(later, lo);
    TITAN_CHECK(trainer.step() == resume_at, "titan verify: the resumed run starts after step ", trainer.step(),
                ", not after step ", resume_at, " where its checkpoint was saved (the step was not loaded: ",
                "train_state in [checkpoint] exclude_from_loading?)");
    report.resumed_layout = trainer.parallel_dims().describe();
    run_steps(trainer, resume_at + 1, options.steps);
  }
  if (!on_rank0) return report;

  // The reference: one process, every data-parallel rank's batches.
  config::JobConfig rc = cfg;
  rc.job.dump_folder += "/reference";
  rc.training.data_parallel_replicate_degree = 1;
  rc.training.data_parallel_shard_degree = -1;
  rc.training.tensor_parallel_degree = 1;
  rc.training.enable_loss_parallel = false;
  rc.training.enable_async_tensor_parallel = false;
  rc.training.context_parallel_degree = 1;
  rc.experimental.pipeline_parallel_degree = 1;
  train::TrainerOptions ro = single_process_reference(report.emulated_ranks, quiet_options());
  // The pipeline's micro-batches, one after the other (what float8's
  // activation scales are computed over; fp32 only sums in its order).
  if (cfg.experimental.pipeline_parallel_degree > 1)
    ro.single_process->microbatch_size = cfg.experimental.pipeline_parallel_microbatch_size;
  report.float8 = cfg.float8.enable_float8_linear;
  train::Trainer reference(rc, ro);
  for (int64_t s = 1; s <= options.steps; ++s) {
    const train::StepResult r = reference.train_step();
    const std::optional<metrics::ValidationRecord> ref_val = reference.validate_if_due();
    const train::StepResult& p = parallel_steps[static_cast<size_t>(s - 1)];
    LayoutCheckStep row;
    row.step = s;
    row.loss = p.loss, row.ref_loss = r.loss, row.loss_rel = rel(p.loss, r.loss);
    row.grad_norm = p.grad_norm, row.ref_grad_norm = r.grad_norm, row.grad_norm_rel = rel(p.grad_norm, r.grad_norm);
    const std::map<std::string, at::Tensor>& got = parallel_weights[static_cast<size_t>(s - 1)];
    for (const auto& [name, want] : reference.full_state_dict()) {
      auto it = got.find(name);
      TITAN_CHECK(it != got.end(), "titan verify: the layout has no parameter ", name, " (the reference has)");
      TITAN_CHECK(it->second.sizes() == want.sizes(), "titan verify: ", name, " is ", it->second.sizes(),
                  " in the layout but ", want.sizes(), " in one process");
      const double d = (it->second - want.to(at::kCPU, at::kDouble)).abs().max().item<double>();
      double& g = row.group_diff[parameter_group(name)];
      g = std::max(g, d);
      if (d > row.max_weight_diff || std::isnan(d)) row.max_weight_diff = d, row.worst_parameter = name;
    }
    const auto val = parallel_val_loss.find(s);
    TORCH_INTERNAL_ASSERT(ref_val.has_value() == (val != parallel_val_loss.end()),
                          "the layout and one process validated after different steps");
    if (ref_val) {
      row.val_loss = val->second, row.ref_val_loss = ref_val->loss;
      row.val_loss_rel = rel(val->second, ref_val->loss);
    }
    row.comm = comm[s];
    const ExpectedComm& e = expected[s];
    if (e.modelled) {
      row.expected_comm = e.comm;
      row.comm_differences = comm_differences(row.comm, row.expected_comm);
    } else {
      report.comm_not_modelled_because = e.not_modelled_because;
    }
    row.passed = step_within_bounds(row, report);
    report.steps.push_back(std::move(row));
  }
  return report;
}

std::string format_layout_check(const LayoutCheckReport& r) {
  std::string out = strprintf(
      "titan verify: %s on %d rank%s against one process reading the batches of %lld data-parallel rank%s, %zu "
      "steps, fp32%s\n",
      r.layout.c_str(), r.world_size, r.world_size == 1 ? "" : "s", static_cast<long long>(r.emulated_ranks),
      r.emulated_ranks == 1 ? "" : "s", r.steps.size(), r.float8 ? " with float8 linears" : "");
  const int64_t resume_at = r.options.resume_at;
  if (resume_at > 0)
    out += strprintf("  resumed: after step %lld the layout saves a checkpoint (%s) and stops; a new run%s loads it and "
                     "trains steps %lld-%zu, while one process runs on\n",
                     static_cast<long long>(resume_at), r.resume_save_mode.c_str(),
                     r.resumed_layout == r.layout ? "" : (" as " + r.resumed_layout).c_str(),
                     static_cast<long long>(resume_at + 1), r.steps.size());
  if (!r.float8)
    out += strprintf("  bounds: loss and gradient norm %.1e relative, weights %.1e absolute (fp32 rounding: the "
                     "equivalence matrix measured 1.7e-7 and 1.3e-4 at worst)\n",
                     r.options.rel_tol, r.options.weight_tol);
  else
    out += strprintf("  bounds: loss and gradient norm %.1e relative (float8 rounding: where fp32 sums differ in "
                     "order an element can round to the other float8 neighbour; measured 5.5e-5 at worst), weights "
                     "shown, not judged (AdamW moves a weight by +-lr early on whatever its gradient's size; "
                     "--float8.enable_float8_linear false judges them at fp32's bounds)\n",
                     r.options.float8_rel_tol);
  out += "\n";
  out += strprintf("  %4s  %12s  %12s  %9s  %9s  %9s  %-34s  %s\n", "step", "loss", "1 process", "rel diff",
                   "norm diff", "max |dw|", "where", "verdict");
  for (const LayoutCheckStep& s : r.steps) {
    out += strprintf("  %4lld  %12.8f  %12.8f  %9.2e  %9.2e  %9.2e  %-34s  %s\n", static_cast<long long>(s.step),
                     s.loss, s.ref_loss, s.loss_rel, s.grad_norm_rel, s.max_weight_diff, s.worst_parameter.c_str(),
                     s.passed ? "ok" : "DIVERGES");
    if (s.step == resume_at) out += "        (checkpoint saved, run ended; resumed from it)\n";
  }
  // [validation]'s held-out loss, where both runs validated.
  bool validated = false;
  for (const LayoutCheckStep& s : r.steps) validated = validated || s.val_loss.has_value();
  if (validated) {
    out += strprintf("\n  %4s  %12s  %12s  %9s  %s\n", "step", "val loss", "1 process", "rel diff", "verdict");
    for (const LayoutCheckStep& s : r.steps)
      if (s.val_loss)
        out += strprintf("  %4lld  %12.8f  %12.8f  %9.2e  %s\n", static_cast<long long>(s.step), *s.val_loss,
                         *s.ref_val_loss, s.val_loss_rel, within(s.val_loss_rel, r.rel_bound()) ? "ok" : "DIVERGES");
  }
  // What each mesh dimension carried per step (rank 0's sends), against
  // the analytic count.
  const bool modelled = r.comm_not_modelled_because.empty();
  out += modelled ? "\n  bytes rank 0 sent per step, by process group: measured / analytic count\n"
                  : "\n  bytes rank 0 sent per step, by process group (no analytic count with " +
                        r.comm_not_modelled_because + ")\n";
  for (const LayoutCheckStep& s : r.steps) {
    out += strprintf("  %4lld ", static_cast<long long>(s.step));
    std::map<std::string, std::pair<double, double>> groups;
    for (const auto& [g, kinds] : s.comm) groups[g].first = total_bytes(kinds);
    for (const auto& [g, kinds] : s.expected_comm) groups[g].second = total_bytes(kinds);
    if (groups.empty()) out += " none";
    for (const auto& [g, b] : groups) {
      out += strprintf("  %s %s", g.c_str(), metrics::human_bytes(b.first).c_str());
      if (modelled) out += " / " + metrics::human_bytes(b.second);
    }
    out += modelled ? (s.comm_differences.empty() ? "  (as counted)\n" : "  DIFFERS\n") : "\n";
    for (const std::string& d : s.comm_differences) out += "         " + d + "\n";
  }
  out += "\n  largest |dw| per parameter group, over the steps:\n";
  std::map<std::string, std::pair<double, int64_t>> worst;
  for (const LayoutCheckStep& s : r.steps)
    for (const auto& [g, d] : s.group_diff) {
      auto [it, first] = worst.try_emplace(g, d, s.step);
      if (!first && (d > it->second.first || std::isnan(d))) it->second = {d, s.step};
    }
  for (const auto& [g, w] : worst)
    out += strprintf("    %-28s %9.2e (step %lld)\n", g.c_str(), w.first, static_cast<long long>(w.second));
  const int64_t failed = r.first_failed_step();
  if (failed == 0) {
    out += strprintf("\nverdict: the layout trains as one process does (%zu steps within the bounds%s)\n",
                     r.steps.size(),
                     resume_at > 0 ? strprintf(", resumed after step %lld", static_cast<long long>(resume_at)).c_str()
                                   : "");
  }
  if (!modelled) return out;
  const int64_t differs = r.first_comm_difference_step();
  if (differs == 0)
    out += "communication: every dimension sent what the analytic count says, every step\n";
  else
    out += strprintf(
        "communication: step %lld differs from the analytic count (above); the numbers are judged apart from it\n",
        static_cast<long long>(differs));
  return out;
}

}  // namespace titan::verify
