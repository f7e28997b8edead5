#include "titan/train/loss.hpp"

#include <ATen/ATen.h>

#include "titan/util/error.hpp"

namespace titan::train {

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& labels) {
  TITAN_CHECK(logits.dim() == 3 && labels.dim() == 2 && logits.size(0) == labels.size(0) &&
                  logits.size(1) == labels.size(1),
              "cross_entropy: logits ", logits.sizes(), " do not match labels ", labels.sizes());
  return at::cross_entropy_loss(logits.flatten(0, 1).to(at::kFloat), labels.flatten(0, 1));
}

}  // namespace titan::train
