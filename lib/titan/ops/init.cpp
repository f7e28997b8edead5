#include "titan/ops/init.hpp"

#include <ATen/core/grad_mode.h>

#include <cmath>

#include "titan/util/error.hpp"

namespace titan::ops {

namespace {
double normal_cdf(double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; }
}  // namespace

void trunc_normal_(at::Tensor& tensor, double mean, double std, double a, double b) {
  TITAN_CHECK(std > 0, "trunc_normal_: std must be positive, got ", std);
  TITAN_CHECK(a < b, "trunc_normal_: need a < b, got a=", a, " b=", b);
  at::NoGradGuard no_grad;
  const double lo = normal_cdf((a - mean) / std);
  const double hi = normal_cdf((b - mean) / std);
  // Uniform on [2·lo-1, 2·hi-1], then erfinv gives a standard normal restricted
  // to [(a-mean)/std, (b-mean)/std] / √2.
  tensor.uniform_(2 * lo - 1, 2 * hi - 1);
  tensor.erfinv_();
  tensor.mul_(std * std::sqrt(2.0));
  tensor.add_(mean);
  tensor.clamp_(a, b);
}

}  // namespace titan::ops
