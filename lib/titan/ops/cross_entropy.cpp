#include "titan/ops/cross_entropy.hpp"

#include <ATen/ATen.h>

#include "titan/util/error.hpp"

namespace titan::ops {

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& labels, LossReduction reduction) {
  TITAN_CHECK(logits.dim() == 3 && labels.dim() == 2 && logits.size(0) == labels.size(0) &&
                  logits.size(1) == labels.size(1),
              "cross_entropy: logits ", logits.sizes(), " do not match labels ", labels.sizes());
  const int64_t how = reduction == LossReduction::Sum ? at::Reduction::Sum : at::Reduction::Mean;
  return at::cross_entropy_loss(logits.flatten(0, 1).to(at::kFloat), labels.flatten(0, 1), /*weight=*/{}, how,
                                kIgnoreIndex);
}

int64_t counted_targets(const at::Tensor& labels) { return labels.ne(kIgnoreIndex).sum().item<int64_t>(); }

}  // namespace titan::ops
