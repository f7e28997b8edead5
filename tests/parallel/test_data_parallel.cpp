// DDP (lib/titan/parallel/data_parallel) against the single-process
// reference: every rank trains the tiny Llama 3 on its slice of the global
// batch with replicate(), and also trains the reference itself on the whole
// batch (no communication), so each rank checks its own gradients and
// parameters. Every comparison prints the differences it saw.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <cstdio>

#include "support/dist_test.hpp"
#include "titan/dist/comm_log.hpp"
#include "titan/parallel/activation_checkpoint/checkpoint.hpp"
#include "titan/parallel/data_parallel.hpp"
#include "titan/ops/cross_entropy.hpp"
#include "titan/verify/data_parallel_technique.hpp"
#include "titan/verify/reference_run.hpp"

using namespace titan::parallel;
using namespace titan::verify;
using titan::testing::world;

namespace {

// fp32 tolerance. DDP and the reference do the same arithmetic except for
// where gradients are summed: the reference sums over the whole batch
// inside one matmul, DDP sums per rank and then across ranks in the
// all-reduce, so only the rounding of those sums differs — ~1e-7 relative
// per step, which Adam may magnify a little for elements whose gradient is
// near zero (its update is g/√v; parameters get adam_param_tolerance).
// 1e-5 relative + 1e-6 absolute on gradients leaves a margin of ~10x over
// what these runs show, and is ~1000x below what a missing or wrongly
// scaled all-reduce gives (see StarterWithoutSyncFails).
const Tolerance kFp32{1e-5, 1e-6};

// A bucket cap small enough (48 KiB) to split the ~0.46 MB tiny model into
// several buckets.
constexpr double kSmallBucketMb = 48.0 / 1024.0;

RunSpec spec_with(int64_t grad_accum = 1, int64_t steps = 3) {
  RunSpec s;
  s.grad_accum = grad_accum;
  s.steps = steps;
  s.device = world().device();  // the GPU twins (TITAN_TEST_DEVICE=cuda) train on it
  return s;
}

// Trains with DDP on this rank, starting from the model built with `seed`.
Trajectory train_ddp(const RunSpec& spec, ReplicateOptions options, int64_t seed,
                     std::vector<BucketInfo>* buckets = nullptr) {
  const auto& w = world();
  titan::dist::CommLog::instance().clear();  // step numbers restart with every run
  auto model = build_model(spec, seed);
  auto ddp = replicate(*model, w.group(), options);
  if (buckets) *buckets = ddp->buckets();
  auto optimizer = build_optimizer(spec, model->parameters());
  return run_steps(spec, model, *optimizer, w.rank(), w.size(), data_parallel_technique(ddp));
}

// Prints the per-step differences and checks them against `tol`.
void expect_equivalent(const Trajectory& ref, const Trajectory& got, const Tolerance& tol, const char* what) {
  auto diffs = compare(ref, got, tol, adam_param_tolerance(RunSpec::default_optimizer().lr));
  for (size_t i = 0; i < diffs.size(); ++i) {
    const auto& d = diffs[i];
    std::printf("[rank %d] %s step %zu: loss ref %.7f ddp %.7f |dloss| %.3g  max|dgrad| %.3g (%s)  max|dparam| %.3g (%s)\n",
                world().rank(), what, i + 1, d.ref_loss, d.got_loss, d.loss, d.grads.max_abs,
                d.grads.worst.c_str(), d.params.max_abs, d.params.worst.c_str());
    EXPECT_TRUE(d.loss_ok) << what << " step " << i + 1 << ": |dloss| = " << d.loss;
    EXPECT_TRUE(d.grads.ok()) << what << " step " << i + 1 << ": gradient " << d.grads.worst_excess_name
                              << " off by " << d.grads.worst_excess << " beyond tolerance";
    EXPECT_TRUE(d.params.ok()) << what << " step " << i + 1 << ": parameter " << d.params.worst_excess_name
                               << " off by " << d.params.worst_excess << " beyond tolerance";
  }
}

int64_t all_reduces_in_step(int64_t step, const std::string& group) {
  int64_t n = 0;
  for (const auto& r : titan::dist::CommLog::instance().records_of_step(step))
    if (r.op == titan::dist::CommOp::AllReduce && r.group == group) ++n;
  return n;
}

}  // namespace

TEST(PlanBuckets, ReverseOrderCapAndDtype) {
  // Sizes in registration order; buckets fill from the back.
  // 20 + 20 fills the cap exactly; 30 + 10 too; the last 10 starts a third.
  std::vector<std::vector<size_t>> expected = {{4, 3}, {2, 1}, {0}};
  EXPECT_EQ(plan_buckets({10, 10, 30, 20, 20}, {0, 0, 0, 0, 0}, 40), expected);
  // A parameter above the cap gets a bucket of its own.
  expected = {{2}, {1}, {0}};
  EXPECT_EQ(plan_buckets({10, 100, 10}, {0, 0, 0}, 15), expected);
  // A new dtype starts a new bucket even with room left.
  expected = {{2}, {1, 0}};
  EXPECT_EQ(plan_buckets({1, 1, 1}, {5, 5, 7}, 100), expected);
  EXPECT_THROW(plan_buckets({1}, {0}, 0), titan::Error);
}

TEST(DataParallel, Fp32MatchesReferenceWithSeveralBuckets) {
  RunSpec spec = spec_with();
  Trajectory ref = train_reference(spec);
  std::vector<BucketInfo> buckets;
  Trajectory ddp = train_ddp(spec, {.bucket_cap_mb = kSmallBucketMb}, spec.model_seed, &buckets);
  std::printf("[rank %d] %zu buckets of cap %.0f bytes\n", world().rank(), buckets.size(), kSmallBucketMb * 1048576);
  EXPECT_GE(buckets.size(), 3u);
  // The first bucket holds the last-registered parameter (output.weight).
  ASSERT_FALSE(buckets.empty());
  EXPECT_EQ(buckets.front().names.front(), "output.weight");
  // One all-reduce per bucket per step, and nothing else.
  if (world().size() > 1)
    for (int64_t s = 1; s <= spec.steps; ++s)
      EXPECT_EQ(all_reduces_in_step(s, world().group()->name()), static_cast<int64_t>(buckets.size()));
  expect_equivalent(ref, ddp, kFp32, "fp32");
}

TEST(DataParallel, DefaultBucketIsOneAllReduce) {
  RunSpec spec = spec_with(1, 2);
  Trajectory ref = train_reference(spec);
  std::vector<BucketInfo> buckets;
  Trajectory ddp = train_ddp(spec, {}, spec.model_seed, &buckets);
  EXPECT_EQ(buckets.size(), 1u);
  expect_equivalent(ref, ddp, kFp32, "one bucket");
}

TEST(DataParallel, GradientAccumulationWithNoSync) {
  // 8 sequences over 2 or 4 ranks in 2 micro-batches each.
  RunSpec spec = spec_with(/*grad_accum=*/2);
  Trajectory ref = train_reference(spec);
  std::vector<BucketInfo> buckets;
  Trajectory ddp = train_ddp(spec, {.bucket_cap_mb = kSmallBucketMb}, spec.model_seed, &buckets);
  // no_sync: the first micro-batch's backward communicates nothing, so a
  // step has exactly one all-reduce per bucket, not two.
  if (world().size() > 1)
    for (int64_t s = 1; s <= spec.steps; ++s)
      EXPECT_EQ(all_reduces_in_step(s, world().group()->name()), static_cast<int64_t>(buckets.size()))
          << "step " << s;
  expect_equivalent(ref, ddp, kFp32, "grad-accum 2");
}

TEST(DataParallel, OddShapedParameterIsAveragedLikeAnyOther) {
  RunSpec spec = spec_with(1, 1);
  ASSERT_NE(spec.model.vocab_size % 2, 0);  // tok_embeddings/output: 131 rows
  Trajectory ref = train_reference(spec);
  Trajectory ddp = train_ddp(spec, {.bucket_cap_mb = kSmallBucketMb}, spec.model_seed);
  for (size_t i = 0; i < ref.steps[0].grads.size(); ++i) {
    const auto& [name, g] = ref.steps[0].grads[i];
    if (name != "tok_embeddings.weight" && name != "output.weight") continue;
    EXPECT_EQ(g.size(0), 131);
    double d = titan::testing::max_abs_diff(g, ddp.steps[0].grads[i].second);
    std::printf("[rank %d] %s [%lld, %lld]: max|dgrad| %.3g\n", world().rank(), name.c_str(), (long long)g.size(0),
                (long long)g.size(1), d);
    EXPECT_LE(d, 1e-6) << name;
  }
}

TEST(DataParallel, BroadcastMakesDifferentlySeededRanksIdentical) {
  RunSpec spec = spec_with(1, 2);
  const auto& w = world();
  // Rank r initialises from its own seed; only rank 0's equals the reference.
  const int64_t seed = spec.model_seed + 1000 * w.rank();
  auto model = build_model(spec, seed);
  Trajectory ref = train_reference(spec);
  double before = compare(ref.initial_params, snapshot_params(*model), {0, 0}).max_abs;
  std::printf("[rank %d] before broadcast: max|dparam| vs rank 0 = %.3g\n", w.rank(), before);
  if (w.rank() != 0) EXPECT_GT(before, 1e-3);  // the setup really differs

  auto ddp = replicate(*model, w.group(), {.bucket_cap_mb = kSmallBucketMb});
  double after = compare(ref.initial_params, snapshot_params(*model), {0, 0}).max_abs;
  std::printf("[rank %d] after broadcast: max|dparam| vs rank 0 = %.3g\n", w.rank(), after);
  EXPECT_EQ(after, 0.0);

  auto optimizer = build_optimizer(spec, model->parameters());
  Trajectory got = run_steps(spec, model, *optimizer, w.rank(), w.size(), data_parallel_technique(ddp));
  expect_equivalent(ref, got, kFp32, "after broadcast");
}

TEST(DataParallel, FirstBucketAllReduceStartsBeforeBackwardEnds) {
  RunSpec spec = spec_with(1, 1);
  const auto& w = world();
  auto& log = titan::dist::CommLog::instance();
  auto model = build_model(spec, spec.model_seed);
  auto ddp = replicate(*model, w.group(), {.bucket_cap_mb = kSmallBucketMb});
  ASSERT_GE(ddp->buckets().size(), 3u);

  // The embedding is the first thing forward does, so its gradient is the
  // last thing backward computes: a hook on it marks the end of backward's
  // compute, measured independently of DDP's own bookkeeping.
  double embedding_grad_us = -1;
  auto hook = model->tok_embeddings->weight.register_hook([&](const at::Tensor&) {
    embedding_grad_us = log.now_us();
  });
  const int64_t step = 9001;  // a step number no other test uses
  log.begin_step(step);
  auto batch = local_micro_batches(spec, 1, w.rank(), w.size());
  at::Tensor loss = titan::ops::cross_entropy(model->forward(batch[0].inputs), batch[0].labels);
  loss.backward();
  const double backward_returned_us = log.now_us();
  model->tok_embeddings->weight.remove_hook(hook);
  log.begin_step(kBookkeepingStep);

  std::vector<titan::dist::CommRecord> reduces;
  for (const auto& r : log.records_of_step(step))
    if (r.op == titan::dist::CommOp::AllReduce) reduces.push_back(r);
  ASSERT_EQ(reduces.size(), ddp->buckets().size());
  double first_start = reduces.front().start_us;
  for (const auto& r : reduces) first_start = std::min(first_start, r.start_us);
  std::printf("[rank %d] first bucket all-reduce started %.0f us before the embedding gradient (the end of "
              "backward's compute); backward returned %.0f us after it; %lld of %zu buckets launched from hooks\n",
              w.rank(), embedding_grad_us - first_start, backward_returned_us - embedding_grad_us,
              (long long)ddp->launched_in_backward(), reduces.size());
  ASSERT_GT(embedding_grad_us, 0);
  EXPECT_LT(first_start, embedding_grad_us);
  EXPECT_EQ(ddp->launched_in_backward(), static_cast<int64_t>(ddp->buckets().size()));
}

// A model whose last layer runs inside an activation checkpoint: the first
// gradients DDP sees arrive inside the checkpoint's own backward (its
// recompute's). DDP's end-of-backward callback must still wait for the
// whole backward: queued on the checkpoint's inner backward it ran when
// that ended and failed with "no gradient for first.weight, first.bias".
struct LastLayerCheckpointed : torch::nn::Module {
  LastLayerCheckpointed() {
    first = register_module("first", torch::nn::Linear(6, 5));
    last = register_module("last", torch::nn::Linear(5, 3));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = at::tanh(first->forward(x));
    return titan::ac::checkpoint([this](const at::Tensor& in) { return last->forward(in); }, h);
  }
  torch::nn::Linear first{nullptr}, last{nullptr};
};

TEST(DataParallel, GradientsFromInsideACheckpointAreAveragedWithTheRest) {
  const auto& w = world();
  constexpr int64_t kRowsPerRank = 4;
  auto build = [] {
    at::manual_seed(3);
    auto m = std::make_shared<LastLayerCheckpointed>();
    m->to(world().device());
    return m;
  };
  at::manual_seed(4);
  const at::Tensor x = at::randn({kRowsPerRank * w.size(), 6}).to(w.device());
  auto reference = build();
  reference->forward(x).pow(2).mean().backward();

  auto model = build();
  auto ddp = replicate(*model, w.group(), {});
  model->forward(x.narrow(0, kRowsPerRank * w.rank(), kRowsPerRank)).pow(2).mean().backward();
  double worst = 0;
  auto ref = reference->named_parameters();
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    worst = std::max(worst, titan::testing::max_abs_diff(p.value().grad(), ref[p.key()].grad()));
  }
  std::printf("[rank %d] checkpointed last layer: max|dgrad| vs one process on the whole batch %.3g\n", w.rank(),
              worst);
  // The mean of the ranks' means against one mean: fp32 rounding only.
  EXPECT_LE(worst, 1e-7);  // measured 0 (1 rank), 7.5e-9 (2), 1.5e-8 (4)
}

TEST(DataParallel, Bf16MatchesReferenceLoosely) {
  // bf16 parameters and gradients, all-reduced in bf16. bf16 keeps 8 bits
  // of mantissa (relative rounding 2^-9 ≈ 2e-3): the per-rank partial sums
  // and the all-reduce each round, so gradients differ by a few ulp of
  // their largest elements, and Adam turns a sign flip of a near-zero
  // gradient into a full lr-sized (1e-3) step. Tolerance: loss 1e-2
  // relative; gradients 5e-2 relative + 1e-3 absolute; parameters 2e-2
  // relative + 3·lr absolute after 2 steps.
  RunSpec spec = spec_with(1, 2);
  spec.dtype = at::kBFloat16;
  Trajectory ref = train_reference(spec);
  Trajectory ddp = train_ddp(spec, {.bucket_cap_mb = kSmallBucketMb}, spec.model_seed);
  auto diffs = compare(ref, ddp, {5e-2, 1e-3}, {2e-2, 3 * spec.optimizer.lr});
  for (size_t i = 0; i < diffs.size(); ++i) {
    const auto& d = diffs[i];
    std::printf("[rank %d] bf16 step %zu: loss ref %.5f ddp %.5f |dloss| %.3g  max|dgrad| %.3g  max|dparam| %.3g\n",
                world().rank(), i + 1, d.ref_loss, d.got_loss, d.loss, d.grads.max_abs, d.params.max_abs);
    EXPECT_LE(d.loss, 1e-2 * d.ref_loss);
    EXPECT_TRUE(d.grads.ok()) << "gradient " << d.grads.worst_excess_name << " off by " << d.grads.worst_excess;
    auto p = compare(ref.steps[i].params, ddp.steps[i].params, {2e-2, 3 * spec.optimizer.lr});
    EXPECT_TRUE(p.ok()) << "parameter " << p.worst_excess_name << " off by " << p.worst_excess;
  }
}

TEST(DataParallel, WithoutGradientSyncTheCheckFails) {
  // The harness must be able to fail: training each rank on its own slice
  // without averaging (what a DDP with no all-reduce would do) is far
  // outside the fp32 tolerance once there is more than one rank.
  if (world().size() == 1) GTEST_SKIP() << "one rank trains on the whole batch";
  RunSpec spec = spec_with(1, 1);
  Trajectory ref = train_reference(spec);
  auto model = build_model(spec, spec.model_seed);
  auto optimizer = build_optimizer(spec, model->parameters());
  Technique local_only;
  local_only.global_losses = average_over(world().group());
  Trajectory got = run_steps(spec, model, *optimizer, world().rank(), world().size(), local_only);
  auto d = compare(ref, got, kFp32, adam_param_tolerance(spec.optimizer.lr));
  std::printf("[rank %d] without sync: max|dgrad| %.3g (tolerance excess %.3g)\n", world().rank(),
              d[0].grads.max_abs, d[0].grads.worst_excess);
  EXPECT_FALSE(d[0].grads.ok());
  EXPECT_GT(d[0].grads.max_abs, 1e3 * kFp32.atol);
}

TEST(DataParallel, BadInputIsOneLineError) {
  RunSpec spec;
  spec.global_batch = 6;
  spec.grad_accum = 4;
  try {
    spec.validate(world().size());
    FAIL() << "6 sequences in 4 micro-batches should not validate";
  } catch (const titan::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("does not split"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  auto model = build_model(spec_with(), 1);
  EXPECT_THROW(replicate(*model, world().group(), {.bucket_cap_mb = 0}), titan::Error);
  EXPECT_THROW(parse_dtype("fp8"), titan::Error);
}
