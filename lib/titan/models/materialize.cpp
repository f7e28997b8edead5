#include "titan/models/materialize.hpp"

#include "titan/ops/param_module.hpp"
#include "titan/util/error.hpp"

namespace titan::models {

void to_empty(torch::nn::Module& module, at::Device device) {
  at::NoGradGuard no_grad;
  for (const auto& item : module.named_modules(/*name_prefix=*/"", /*include_self=*/true)) {
    torch::nn::Module& m = *item.value();
    TITAN_CHECK(m.named_buffers(/*recurse=*/false).is_empty(), "to_empty: module '", item.key(),
                "' has buffers, which to_empty does not handle");
    auto own = m.named_parameters(/*recurse=*/false);
    if (own.is_empty()) continue;
    auto* swappable = dynamic_cast<ops::ParamModule*>(&m);
    TITAN_CHECK(swappable != nullptr, "to_empty: module '", item.key(), "' (", m.name(),
                ") owns parameters but is not a titan::ops::ParamModule");
    for (const auto& p : own)
      swappable->replace_parameter(p.key(), at::empty(p.value().sizes(), p.value().options().device(device)));
  }
}

bool has_meta_parameters(const torch::nn::Module& module) {
  for (const auto& p : module.parameters(/*recurse=*/true))
    if (p.is_meta()) return true;
  return false;
}

int64_t numel_of_parameters(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters(/*recurse=*/true)) n += p.numel();
  return n;
}

}  // namespace titan::models
