// Activation checkpointing against no checkpointing: the same tiny Llama 3
// trained a few AdamW steps with every mode (full; selective every 2nd
// block; selective every block) must give the same losses, gradients and
// weights — bit for bit on one process, since the recompute repeats the
// very same kernels — and under FSDP and TP the same as the
// single-process reference, within the tolerances of those tests (the AC
// run is compared with the reference exactly as the plain FSDP / TP run is,
// and the two differences are printed side by side). It also checks what
// AC is for: less activation memory; and what it costs: the recompute's
// collectives under TP, the replayed RNG.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>

#include "support/dist_test.hpp"
#include "titan/dist/comm_log.hpp"
#include "titan/dist/device_mesh.hpp"
#include "titan/metrics/tensor_memory.hpp"
#include "titan/models/llama3/tp_plan.hpp"
#include "titan/parallel/activation_checkpoint/checkpoint.hpp"
#include "titan/parallel/float8/float8_linear.hpp"
#include "titan/parallel/fsdp/fully_shard.hpp"
#include "titan/ops/cross_entropy.hpp"
#include "titan/verify/fsdp_technique.hpp"
#include "titan/verify/tp_technique.hpp"

namespace {

using titan::dist::DeviceMesh;
using titan::models::llama3::Transformer;
using titan::testing::world;
namespace verify = titan::verify;
namespace ac = titan::ac;

verify::RunSpec ac_spec() {
  verify::RunSpec spec;
  spec.model.n_layers = 4;
  spec.device = world().device();
  return spec;
}

struct Mode {
  const char* mode;
  const char* option;
};
const Mode kModes[] = {{"full", "2"}, {"selective", "2"}, {"selective", "1"}, {"selective", "op"}};

int64_t apply(Transformer& model, const Mode& m) {
  const ac::AcPolicy policy = ac::AcPolicy::from_config(m.mode, m.option);
  const auto which = policy.blocks(model->args().n_layers);
  const bool per_op = policy.per_op();
  int64_t n = 0;
  for (auto& b : model->blocks())
    if (which[static_cast<size_t>(b->layer_id)]) {
      if (per_op) ac::checkpoint_module_selective_op(*b);
      else ac::checkpoint_module(*b);
      ++n;
    }
  return n;
}

double worst(const std::vector<verify::StepDiff>& diffs, bool* ok) {
  double w = 0;
  for (const auto& d : diffs) {
    w = std::max({w, d.loss, d.grads.max_abs, d.params.max_abs});
    *ok = *ok && d.ok();
  }
  return w;
}

TEST(ActivationCheckpoint, EveryModeTrainsBitForBitLikeNone) {
  const verify::RunSpec spec = ac_spec();
  const verify::Trajectory ref = verify::train_reference(spec);
  for (const Mode& m : kModes) {
    Transformer model = verify::build_model(spec, spec.model_seed);
    const int64_t wrapped = apply(model, m);
    auto opt = verify::build_optimizer(spec, model->parameters());
    const verify::Trajectory got = verify::run_steps(spec, model, *opt, 0, 1);
    bool ok = true;
    const double d = worst(verify::compare(ref, got, verify::Tolerance{0, 0}, verify::Tolerance{0, 0}), &ok);
    if (world().rank() == 0)
      std::printf("[measured] AC %s %s (%lld of 4 blocks): max |diff| vs no AC over loss, grads, params = %.3g\n",
                  m.mode, m.option, static_cast<long long>(wrapped), d);
    EXPECT_TRUE(ok) << m.mode << " " << m.option << ": max diff " << d;
  }
}

// Bytes of activations the graph holds after a forward of the model that
// `wrap` checkpointed.
int64_t activations_after_forward(const verify::RunSpec& spec, const std::function<void(Transformer&)>& wrap) {
  Transformer model = verify::build_model(spec, spec.model_seed);
  wrap(model);
  const auto mb = verify::local_micro_batches(spec, 1, 0, 1).front();
  const c10::Device dev = spec.device;
  for (int k = 0; k < 2; ++k) {  // the first pass allocates the RoPE table and .grad
    titan::metrics::reset_tensor_memory_peak(dev);
    const int64_t start = titan::metrics::tensor_memory(dev).current_bytes;
    at::Tensor loss = titan::ops::cross_entropy(model->forward(mb.inputs), mb.labels);
    const int64_t after_forward = titan::metrics::tensor_memory(dev).current_bytes - start;
    loss.backward();
    if (k == 1) return after_forward;
  }
  return 0;
}

TEST(ActivationCheckpoint, KeepsLessActivationMemory) {
  const verify::RunSpec spec = ac_spec();
  auto peak_of = [&](const Mode* m) {
    return activations_after_forward(spec, [m](Transformer& model) {
      if (m) apply(model, *m);
    });
  };
  const int64_t none = peak_of(nullptr), full = peak_of(&kModes[0]), every2 = peak_of(&kModes[1]),
                op = peak_of(&kModes[3]);
  if (world().rank() == 0)
    std::printf("[measured] activations held after forward: none %.1f KiB, selective op %.1f KiB, selective every 2nd "
                "%.1f KiB, full %.1f KiB\n",
                none / 1024.0, op / 1024.0, every2 / 1024.0, full / 1024.0);
  EXPECT_LT(op, none);
  EXPECT_GT(op, full);
  EXPECT_LT(full, none / 3);  // a block's input instead of all its intermediates
  EXPECT_LT(every2, none);
  EXPECT_LT(full, every2);
}

TEST(ActivationCheckpoint, ReplaysTheRandomDrawsOfTheForward) {
  // A forward that draws random numbers (as dropout would) must see the
  // same draws when recomputed, or its gradient would be another one's.
  at::manual_seed(3);
  at::Tensor x = titan::testing::seeded(1, {64}).requires_grad_(true);
  auto noisy = [](const at::Tensor& v) { return v * at::rand_like(v); };
  at::manual_seed(5);
  at::Tensor y = ac::checkpoint(noisy, x);
  at::Tensor after_forward = at::rand({4});  // draws after the forward, before backward
  y.sum().backward();
  at::Tensor g = x.grad().clone();
  at::manual_seed(5);
  at::Tensor x2 = x.detach().clone().requires_grad_(true);
  noisy(x2).sum().backward();
  EXPECT_TRUE(at::equal(g, x2.grad())) << "recompute drew other random numbers";
  // And the backward leaves the generator where it found it.
  at::manual_seed(5);
  (void)at::rand_like(x);
  EXPECT_TRUE(at::equal(after_forward, at::rand({4})));
}

// Under FSDP and TP the AC run must equal the plain FSDP / TP run exactly
// (the recompute repeats the same kernels and collectives on the same
// data), and both the reference within those tests' tolerances (FSDP:
// 1e-5 absolute, test_fsdp.cpp; TP: test_tensor_parallel.cpp's).
TEST(ActivationCheckpoint, WithFsdpEqualsPlainFsdp) {
  if (world().size() < 2) GTEST_SKIP() << "FSDP needs 2 ranks";
  const verify::RunSpec spec = ac_spec();
  const verify::Trajectory ref = verify::train_reference(spec);
  DeviceMesh mesh(world(), {world().size()}, {"dp_shard"});
  verify::Trajectory plain;
  for (const Mode* m : {static_cast<const Mode*>(nullptr), &kModes[0], &kModes[1], &kModes[3]}) {
    Transformer model = verify::build_model(spec, spec.model_seed);
    if (m) apply(model, *m);
    titan::fsdp::FullyShardOptions fo;  // reshard after forward: the recompute must gather again
    for (auto& b : model->blocks()) titan::fsdp::fully_shard(*b, mesh, fo);
    titan::fsdp::fully_shard(*model, mesh, fo);
    auto opt = verify::build_optimizer(spec, model->parameters());
    titan::dist::CommLog::instance().clear();
    const verify::Trajectory got = verify::run_steps(spec, model, *opt, world().rank(), world().size(),
                                                     verify::fsdp_technique(*model, mesh.group(0)));
    int64_t gathers = 0;
    for (const auto& r : titan::dist::CommLog::instance().records())
      gathers += r.step == 1 && r.op == titan::dist::CommOp::AllGather;
    bool ok_ref = true, ok_plain = true;
    const double d_ref = worst(verify::compare(ref, got, {0, 1e-5}, {0, 1e-5}), &ok_ref);
    const double d_plain = m ? worst(verify::compare(plain, got, {0, 0}, {0, 0}), &ok_plain) : 0.0;
    if (!m) plain = got;
    if (world().rank() == 0)
      std::printf("[measured] FSDP x%d %-12s vs reference %.3g, vs plain FSDP %.3g; all-gathers in step 1: %lld\n",
                  world().size(), m ? (std::string(m->mode) + " " + m->option).c_str() : "no AC", d_ref, d_plain,
                  static_cast<long long>(gathers));
    EXPECT_TRUE(ok_ref);
    EXPECT_TRUE(ok_plain) << "AC changed what FSDP computes";
  }
}

TEST(ActivationCheckpoint, WithTensorParallelEqualsPlainTpAndRecomputesItsCollectives) {
  if (world().size() < 2) GTEST_SKIP() << "TP needs 2 ranks";
  verify::RunSpec spec = ac_spec();
  spec.model.n_heads = 8, spec.model.n_kv_heads = 4;  // whole heads on 4 ranks
  const verify::Trajectory ref = verify::train_reference(spec);
  DeviceMesh mesh(world(), {world().size()}, {"tp"});
  int64_t collectives[3] = {0, 0, 0};
  const Mode* modes[3] = {nullptr, &kModes[0], &kModes[3]};  // none, full, op
  verify::Trajectory plain;
  for (int k = 0; k < 3; ++k) {
    Transformer model = verify::build_model(spec, spec.model_seed);
    titan::models::llama3::apply_tp(model, mesh, {});
    if (modes[k]) apply(model, *modes[k]);
    auto opt = verify::build_optimizer(spec, model->parameters());
    titan::dist::CommLog::instance().clear();
    const verify::Trajectory got =
        verify::run_steps(spec, model, *opt, 0, 1, verify::tp_technique(*model, world().device()));
    for (const auto& r : titan::dist::CommLog::instance().records()) collectives[k] += r.step == 1;
    bool ok_ref = true, ok_plain = true;
    const double d_ref = worst(verify::compare(ref, got, {1e-6, 2e-7}, verify::adam_param_tolerance(spec.optimizer.lr)), &ok_ref);
    const double d_plain = k ? worst(verify::compare(plain, got, {0, 0}, {0, 0}), &ok_plain) : 0.0;
    if (k == 0) plain = got;
    if (world().rank() == 0)
      std::printf("[measured] TP x%d (SP) %-8s vs reference %.3g, vs plain TP %.3g; collectives in step 1: %lld\n",
                  world().size(), k == 0 ? "no AC" : (k == 1 ? "full AC" : "op AC"), d_ref, d_plain,
                  static_cast<long long>(collectives[k]));
    EXPECT_TRUE(ok_ref);
    EXPECT_TRUE(ok_plain) << "AC changed what TP computes";
  }
  // Each block's forward collectives (under SP an all-gather and a
  // reduce-scatter for attention and again for the FFN) run once more in
  // its recompute.
  EXPECT_EQ(collectives[1] - collectives[0], 4 * spec.model.n_layers);
  EXPECT_EQ(collectives[2] - collectives[0], 4 * spec.model.n_layers);  // op keeps matmuls, not collectives
}

// torchtitan's per_op_sac_force_recompute_mm_shapes_by_fqns: naming
// feed_forward.w1 recomputes every matmul of its weight shape (w1 and w3,
// both [hidden, dim]) instead of keeping it. Training stays bit for bit the
// same; the kept activations shrink by those two outputs per block
// ([batch·seq, hidden] fp32 each: 8·16·192·4 = 96 KiB), which the test
// computes from the shapes. The default (["moe.router.gate"]) names
// nothing in Llama and changes nothing.
TEST(ActivationCheckpoint, ForcedRecomputeShapesAreNotKept) {
  const verify::RunSpec spec = ac_spec();
  auto op_with = [&](std::vector<std::string> fqns) {
    return [fqns](Transformer& model) {
      for (auto& b : model->blocks())
        ac::checkpoint_module_selective_op(*b, fqns, "layers." + std::to_string(b->layer_id));
    };
  };
  const int64_t op = activations_after_forward(spec, op_with({}));
  const int64_t dflt = activations_after_forward(spec, op_with({"moe.router.gate"}));
  const int64_t forced = activations_after_forward(spec, op_with({"feed_forward.w1"}));
  const titan::models::llama3::ModelArgs args = spec.model;
  Transformer probe = verify::build_model(spec, spec.model_seed);
  const int64_t hidden = probe->blocks()[0]->feed_forward->w1->weight.size(0);
  const int64_t expected = 2 * args.n_layers * spec.global_batch * spec.seq_len * hidden * 4;
  if (world().rank() == 0)
    std::printf("[measured] op AC kept: %.1f KiB, default force list %.1f KiB, w1/w3 forced %.1f KiB (expected %.1f "
                "KiB less)\n",
                op / 1024.0, dflt / 1024.0, forced / 1024.0, expected / 1024.0);
  EXPECT_EQ(dflt, op);
  EXPECT_EQ(op - forced, expected);

  Transformer model = verify::build_model(spec, spec.model_seed);
  op_with({"feed_forward.w1"})(model);
  auto opt = verify::build_optimizer(spec, model->parameters());
  bool ok = true;
  const double d = worst(verify::compare(verify::train_reference(spec), verify::run_steps(spec, model, *opt, 0, 1),
                                         verify::Tolerance{0, 0}, verify::Tolerance{0, 0}),
                         &ok);
  EXPECT_TRUE(ok) << "max diff " << d;

  Transformer other = verify::build_model(spec, spec.model_seed);
  try {
    op_with({"attention"})(other);
    ADD_FAILURE() << "a name matching a non-Linear module was accepted";
  } catch (const titan::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layers.0.attention, which is not a Linear"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// Per-op AC on float8 Linears (converted first, as the trainer does): their
// outputs are kept as plain Linears' are — the same bytes after forward —
// not left to float8's hook to compute again in the recompute (which would
// keep no more than full AC); and training is bit for bit float8 without AC.
TEST(ActivationCheckpoint, PerOpKeepsFloat8LinearsOutputsToo) {
  const verify::RunSpec spec = ac_spec();
  auto float8 = [](Transformer& model) {
    const auto converted = titan::float8::convert_to_float8_training(*model, {"output"}, nullptr);
    EXPECT_GT(converted.size(), 0u) << "nothing converted: the test would not see float8";
  };
  auto per_op = [](Transformer& model) {
    for (auto& b : model->blocks()) ac::checkpoint_module_selective_op(*b);
  };
  const int64_t plain_op = activations_after_forward(spec, per_op);
  const int64_t f8_op = activations_after_forward(spec, [&](Transformer& m) {
    float8(m);
    per_op(m);
  });
  const int64_t f8_full = activations_after_forward(spec, [&](Transformer& m) {
    float8(m);
    for (auto& b : m->blocks()) ac::checkpoint_module(*b);
  });
  if (world().rank() == 0)
    std::printf("[measured] kept after forward: op AC %.1f KiB, float8 + op AC %.1f KiB, float8 + full AC %.1f KiB\n",
                plain_op / 1024.0, f8_op / 1024.0, f8_full / 1024.0);
  EXPECT_EQ(f8_op, plain_op);
  EXPECT_GT(f8_op, f8_full);

  Transformer plain = verify::build_model(spec, spec.model_seed);
  float8(plain);
  auto plain_opt = verify::build_optimizer(spec, plain->parameters());
  Transformer model = verify::build_model(spec, spec.model_seed);
  float8(model);
  per_op(model);
  auto opt = verify::build_optimizer(spec, model->parameters());
  bool ok = true;
  const double d = worst(verify::compare(verify::run_steps(spec, plain, *plain_opt, 0, 1),
                                         verify::run_steps(spec, model, *opt, 0, 1), verify::Tolerance{0, 0},
                                         verify::Tolerance{0, 0}),
                         &ok);
  EXPECT_TRUE(ok) << "float8 + op AC differs from float8 by " << d;
}

TEST(ActivationCheckpoint, BadOptionsAreOneLine) {
  auto err = [](const char* mode, const char* opt) {
    try {
      ac::AcPolicy::from_config(mode, opt);
    } catch (const titan::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(ac::AcPolicy::from_config("selective", "op").blocks(4), std::vector<bool>(4, true));
  EXPECT_TRUE(ac::AcPolicy::from_config("selective", "op").per_op());
  EXPECT_FALSE(ac::AcPolicy::from_config("full", "op").per_op());
  EXPECT_EQ(ac::AcPolicy::from_config("full", "2").blocks(3), std::vector<bool>(3, true));
  EXPECT_EQ(ac::AcPolicy::from_config("none", "2").blocks(3), std::vector<bool>(3, false));
  EXPECT_NE(err("selective", "0").find("positive integer"), std::string::npos);
  EXPECT_NE(err("partial", "2").find("not one of none, selective, full"), std::string::npos);
  EXPECT_EQ(ac::AcPolicy::from_config("selective", "2").blocks(4), (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(ac::AcPolicy::from_config("selective", "3").blocks(6),
            (std::vector<bool>{false, false, true, false, false, true}));
  EXPECT_EQ(ac::AcPolicy::from_config("selective", "3").config_words(), "selective (3)");
  EXPECT_EQ(ac::AcPolicy::from_config("selective", "2").describe(2, 4), "selective AC every 2 block(s) (2 of 4 blocks)");
}

}  // namespace
