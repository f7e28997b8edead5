// Lab 02 checker: your FSDP (lab02::fully_shard with your unshard, reshard
// and reduce_scatter_grad) against a single-process reference on the same
// seed and global batch. One line per check, [PASS] or [FAIL] with what was
// measured; exit 1 while any check fails.
//
// Tolerance 1e-5 absolute (fp32): the two sides only add the same numbers
// in a different order (we see ~1e-7).
#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <cstdio>
#include <string>

#include "fsdp_lab.hpp"
#include "titan/dist/device_mesh.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/program.hpp"
#include "titan/models/llama3/transformer.hpp"
#include "titan/train/loss.hpp"

using titan::models::llama3::Transformer;

namespace {

constexpr double kTol = 1e-5;
constexpr int64_t kSeq = 8, kBatch = 8;

Transformer build() {
  titan::models::llama3::ModelArgs a;
  a.dim = 18;  // 18 rows do not divide by 4; vocab 61 by neither 2 nor 4
  a.n_layers = 2;
  a.n_heads = 3;
  a.n_kv_heads = 1;
  a.vocab_size = 61;
  a.multiple_of = 8;
  a.max_seq_len = kSeq;
  torch::manual_seed(11);
  Transformer m(a);
  m->init_weights();
  return m;
}

std::pair<at::Tensor, at::Tensor> batch(int64_t step) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(77 + step);
  at::Tensor t = at::randint(61, {kBatch, kSeq + 1}, gen, at::TensorOptions().dtype(at::kLong));
  return {t.narrow(1, 0, kSeq), t.narrow(1, 1, kSeq)};
}

// Max over ranks of a local number.
double global_max(double v) {
  at::Tensor t = at::full({1}, v, at::kDouble);
  titan::dist::world().group()->all_reduce(t, titan::dist::ReduceOp::Max);
  return t.item<double>();
}

// Largest |shard - matching rows of the reference| over all parameters, of
// the values or (grad=true) of the gradients.
double shard_diff(Transformer& mine, Transformer& ref, int64_t n, int64_t r, bool grad) {
  auto ref_params = ref->named_parameters(true);
  double worst = 0;
  for (const auto& item : mine->named_parameters(true)) {
    const at::Tensor& full = ref_params[item.key()];
    const int64_t padded = (full.size(0) + n - 1) / n;
    const int64_t rows = item.value().size(0);
    if (rows == 0) continue;
    at::Tensor want = (grad ? full.grad() : full.detach()).narrow(0, std::min(r * padded, full.size(0)), rows);
    at::Tensor have = grad ? item.value().grad() : item.value().detach();
    if (!have.defined()) return 1e30;
    worst = std::max(worst, (have - want).abs().max().item<double>());
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  return titan::run_main(argc, argv, [](int, char**) -> int {
    const auto& world = titan::dist::init_distributed({"cpu"});
    const int64_t n = world.size(), r = world.rank();
    titan::dist::DeviceMesh mesh(world, {n}, {"dp_shard"});
    Transformer ref = build(), mine = build();
    for (auto& block : mine->blocks()) lab02::fully_shard(*block, mesh);
    lab02::fully_shard(*mine, mesh);
    torch::optim::AdamW ref_opt(ref->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
    torch::optim::AdamW opt(mine->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.1));

    int failures = 0;
    auto report = [&](const std::string& name, bool ok, const std::string& seen) {
      if (r == 0) std::printf("[%s] %s: %s\n", ok ? "PASS" : "FAIL", name.c_str(), seen.c_str());
      failures += ok ? 0 : 1;
    };
    char buf[256];
    double worst_loss = 0, worst_grad = 0, worst_param = 0;
    int64_t freed_bytes = -1;
    for (int64_t step = 1; step <= 3; ++step) {
      auto [tokens, labels] = batch(step);
      ref_opt.zero_grad();
      at::Tensor ref_loss = titan::train::cross_entropy(ref->forward(tokens), labels);
      ref_loss.backward();
      opt.zero_grad();
      const int64_t b = kBatch / n;
      at::Tensor loss = titan::train::cross_entropy(mine->forward(tokens.narrow(0, r * b, b)),
                                                    labels.narrow(0, r * b, b));
      // Between forward and backward only the root's full weights may be held.
      if (step == 1) {
        int64_t blocks = 0;
        for (auto& block : mine->blocks()) blocks += lab02::unsharded_bytes(*block);
        freed_bytes = static_cast<int64_t>(global_max(double(blocks)));
      }
      loss.backward();
      at::Tensor mean = loss.detach().reshape({1}).to(at::kDouble);
      world.group()->all_reduce(mean, titan::dist::ReduceOp::Avg);
      worst_loss = std::max(worst_loss, std::abs(mean.item<double>() - ref_loss.item<double>()));
      worst_grad = std::max(worst_grad, global_max(shard_diff(mine, ref, n, r, true)));
      ref_opt.step();
      opt.step();
      worst_param = std::max(worst_param, global_max(shard_diff(mine, ref, n, r, false)));
    }
    std::snprintf(buf, sizeof buf, "max |dloss| over 3 steps %.3g (tolerance %.0e)", worst_loss, kTol);
    report("unshard: the sharded model's loss equals the reference's", worst_loss <= kTol, buf);
    std::snprintf(buf, sizeof buf, "blocks hold %lld bytes of full weights between forward and backward (want 0)",
                  static_cast<long long>(freed_bytes));
    report("reshard: full weights freed after each block's forward", freed_bytes == 0, buf);
    std::snprintf(buf, sizeof buf, "max |dgrad| %.3g (tolerance %.0e)", worst_grad, kTol);
    report("reduce-scatter: shard gradients equal the reference's rows", worst_grad <= kTol, buf);
    std::snprintf(buf, sizeof buf, "max |dparam| after 3 AdamW steps %.3g (tolerance %.0e)", worst_param, kTol);
    report("training: shards equal the reference's rows", worst_param <= kTol, buf);
    if (r == 0) std::printf(failures ? "%d check(s) failed\n" : "all checks passed\n", failures);
    return failures ? 1 : 0;
  });
}
