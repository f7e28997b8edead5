#include "titan/ops/cross_entropy.hpp"

#include <ATen/ATen.h>

#include "titan/util/error.hpp"

namespace titan::ops {

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& labels) {
  TITAN_CHECK(logits.dim() == 3 && labels.dim() == 2 && logits.size(0) == labels.size(0) &&
                  logits.size(1) == labels.size(1),
              "cross_entropy: logits ", logits.sizes(), " do not match labels ", labels.sizes());
  return at::cross_entropy_loss(logits.flatten(0, 1).to(at::kFloat), labels.flatten(0, 1));
}

at::Tensor weigh_shard_loss(const at::Tensor& loss, const at::Tensor& logits, double weight) {
  if (weight == 0.0) return logits.sum().to(at::kFloat) * 0.0;
  return weight == 1.0 ? loss : loss * weight;
}

double shard_loss_weight(const at::Tensor& window_labels, const at::Tensor& shard_labels, int64_t shards) {
  constexpr int64_t kIgnored = -100;  // torch's ignore_index, what cross_entropy skips
  const int64_t window = (window_labels != kIgnored).sum().item<int64_t>();
  const int64_t shard = (shard_labels != kIgnored).sum().item<int64_t>();
  if (window == 0) return 1.0;  // nothing counts anywhere: the loss is NaN alike on every rank and the reference
  return static_cast<double>(shards * shard) / static_cast<double>(window);
}

}  // namespace titan::ops
