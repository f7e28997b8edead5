// Lab 02 checker: your FSDP (lab02::fully_shard with your unshard, reshard
// and reduce_scatter_grad) against the single-process reference on the same
// seed and global batch (titan/verify/reference_run.hpp, the harness the
// chapter, the tests and lab 01 use). One line per check, [PASS] or [FAIL]
// with what was measured; exit 1 while any check fails.
//
// Tolerance 1e-5 absolute (fp32): the two sides only add the same numbers
// in a different order (we see ~1e-7).
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "fsdp_lab.hpp"
#include "lab_check.hpp"
#include "titan/dist/device_mesh.hpp"
#include "titan/dist/world.hpp"
#include "titan/dtensor/dtensor.hpp"
#include "titan/launch/program.hpp"
#include "titan/util/error.hpp"
#include "titan/verify/reference_run.hpp"

using namespace titan;
using namespace titan::verify;
using titan::models::llama3::Transformer;

namespace {

constexpr double kTol = 1e-5;

// A Llama 3 whose shards differ in length from rank to rank (the last may
// be empty), trained 3 steps on a global batch of 8 x 8 tokens.
RunSpec lab_spec() {
  RunSpec spec;
  spec.model = uneven_llama_args();
  spec.seq_len = 8;
  spec.global_batch = 8;
  spec.steps = 3;
  spec.model_seed = 11;
  return spec;
}

using lab::global_max;

// The full tensors behind the lab's shards (values or gradients), gathered
// by the library, never by the code under test: the lab cuts rows the way
// torch.chunk does, which is DTensor's Shard(0). `full` gives the names and
// full shapes (the reference's initial parameters).
NamedTensors gather(Transformer& model, const NamedTensors& full, const std::shared_ptr<const dist::DeviceMesh>& mesh,
                    bool grads) {
  at::NoGradGuard no_grad;
  auto params = model->named_parameters(/*recurse=*/true);
  TITAN_CHECK(params.size() == full.size(), "the sharded model has ", params.size(), " parameters, the reference ",
              full.size());
  NamedTensors out;
  for (size_t i = 0; i < full.size(); ++i) {
    const auto& [name, like] = full[i];
    TITAN_CHECK(params[i].key() == name, "parameter ", i, " is ", params[i].key(), ", the reference's ", name);
    at::Tensor local = grads ? params[i].value().grad() : params[i].value();
    // No gradient at all fails the comparison, as zeros, on every rank alike.
    if (!local.defined()) local = at::zeros_like(params[i].value());
    DTensor shard(local.detach(), mesh, {Placement::shard(0)}, like.sizes().vec());
    out.emplace_back(name, shard.full_tensor().clone());
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int, char**) -> int {
    const auto& world = dist::init_distributed({"cpu"});
    const int64_t n = world.size(), r = world.rank();
    auto mesh = std::make_shared<const dist::DeviceMesh>(world, std::vector<int64_t>{n},
                                                         std::vector<std::string>{"dp_shard"});
    const RunSpec spec = lab_spec();
    Trajectory ref = train_reference(spec);

    Transformer mine = build_model(spec, spec.model_seed);
    for (auto& block : mine->blocks()) lab02::fully_shard(*block, *mesh);
    lab02::fully_shard(*mine, *mesh);

    Technique technique;
    technique.full_grads = [&] { return gather(mine, ref.initial_params, mesh, /*grads=*/true); };
    technique.full_params = [&] { return gather(mine, ref.initial_params, mesh, /*grads=*/false); };
    technique.global_losses = average_over(world.group());
    // Between forward and backward only the root's full weights may be held.
    int64_t step = 0, blocks_bytes = -1;
    technique.begin_step = [&](int64_t s) { step = s; };
    technique.backward = [&](int64_t, int64_t, const std::function<void()>& backward) {
      if (step == 1) {
        blocks_bytes = 0;
        for (auto& block : mine->blocks()) blocks_bytes += lab02::unsharded_bytes(*block);
      }
      backward();
    };
    auto optimizer = build_optimizer(spec, mine->parameters());
    Trajectory got = run_steps(spec, mine, *optimizer, static_cast<int>(r), static_cast<int>(n), technique);
    const Tolerance tol{0, kTol};
    auto diffs = compare(ref, got, tol, tol);

    bool loss_ok = true, grads_ok = true, params_ok = true;
    double worst_loss = 0, worst_grad = 0, worst_param = 0;
    for (const StepDiff& d : diffs) {
      loss_ok = loss_ok && d.loss_ok;
      grads_ok = grads_ok && d.grads.ok();
      params_ok = params_ok && d.params.ok();
      worst_loss = std::max(worst_loss, d.loss);
      worst_grad = std::max(worst_grad, d.grads.max_abs);
      worst_param = std::max(worst_param, d.params.max_abs);
    }
    // Every rank compares the same gathered tensors; the maxima guard
    // against a rank that saw otherwise all the same.
    loss_ok = global_max(loss_ok ? 0 : 1) == 0, grads_ok = global_max(grads_ok ? 0 : 1) == 0;
    params_ok = global_max(params_ok ? 0 : 1) == 0;
    const int64_t freed_bytes = static_cast<int64_t>(global_max(double(blocks_bytes)));

    int failures = 0;
    auto report = [&](const std::string& name, bool ok, const std::string& seen) {
      if (r == 0) std::printf("[%s] %s: %s\n", ok ? "PASS" : "FAIL", name.c_str(), seen.c_str());
      failures += ok ? 0 : 1;
    };
    char buf[256];
    std::snprintf(buf, sizeof buf, "max |dloss| over %lld steps %.3g (tolerance %.0e)", (long long)spec.steps,
                  global_max(worst_loss), kTol);
    report("unshard: the sharded model's loss equals the reference's", loss_ok, buf);
    std::snprintf(buf, sizeof buf, "blocks hold %lld bytes of full weights between forward and backward (want 0)",
                  static_cast<long long>(freed_bytes));
    report("reshard: full weights freed after each block's forward", freed_bytes == 0, buf);
    std::snprintf(buf, sizeof buf, "max |dgrad| %.3g (tolerance %.0e)", global_max(worst_grad), kTol);
    report("reduce-scatter: shard gradients equal the reference's rows", grads_ok, buf);
    std::snprintf(buf, sizeof buf, "max |dparam| after %lld AdamW steps %.3g (tolerance %.0e)", (long long)spec.steps,
                  global_max(worst_param), kTol);
    report("training: shards equal the reference's rows", params_ok, buf);
    if (r == 0) std::printf(failures ? "%d check(s) failed\n" : "all checks passed\n", failures);
    return failures ? 1 : 0;
  });
}
