#include "titan/optim/optimizer.hpp"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "titan/optim/fused_adamw.hpp"
#include "titan/util/error.hpp"

namespace titan::optim {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

void validate(const OptimizerOptions& o) {
  // Checked here rather than left to LibTorch's TORCH_CHECK so that the
  // message is one line that names the config key.
  TITAN_CHECK(std::isfinite(o.lr) && o.lr >= 0, "optimizer.lr must be >= 0, got ", o.lr);
  TITAN_CHECK(o.beta1 >= 0 && o.beta1 < 1, "optimizer.beta1 must be in [0, 1), got ", o.beta1);
  TITAN_CHECK(o.beta2 >= 0 && o.beta2 < 1, "optimizer.beta2 must be in [0, 1), got ", o.beta2);
  TITAN_CHECK(std::isfinite(o.eps) && o.eps >= 0, "optimizer.eps must be >= 0, got ", o.eps);
  TITAN_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
              "optimizer.weight_decay must be >= 0, got ", o.weight_decay);
}

}  // namespace

std::string canonical_optimizer_name(const std::string& name) {
  const std::string l = lower(name);
  if (l == "adamw") return "AdamW";
  if (l == "adam") return "Adam";
  throw Error("optimizer.name: unknown optimizer '" + name + "' (supported: AdamW, Adam)");
}

std::unique_ptr<torch::optim::Optimizer> build_optimizer(std::vector<at::Tensor> params,
                                                         const OptimizerOptions& options) {
  const std::string name = canonical_optimizer_name(options.name);
  validate(options);
  TITAN_CHECK(!params.empty(), "build_optimizer: no parameters to optimize");
  const auto betas = std::make_tuple(options.beta1, options.beta2);
  if (name == "AdamW") {
    auto o = torch::optim::AdamWOptions(options.lr)
                 .betas(betas)
                 .eps(options.eps)
                 .weight_decay(options.weight_decay)
                 .amsgrad(false);
    if (options.fused) return std::make_unique<FusedAdamW>(std::move(params), o);
    return std::make_unique<torch::optim::AdamW>(std::move(params), o);
  }
  auto o = torch::optim::AdamOptions(options.lr)
               .betas(betas)
               .eps(options.eps)
               .weight_decay(options.weight_decay)
               .amsgrad(false);
  return std::make_unique<torch::optim::Adam>(std::move(params), o);
}

std::vector<double> learning_rates(const torch::optim::Optimizer& optimizer) {
  std::vector<double> lrs;
  for (const auto& group : optimizer.param_groups()) lrs.push_back(group.options().get_lr());
  return lrs;
}

}  // namespace titan::optim
