#include "titan/ops/param_module.hpp"

#include "titan/util/error.hpp"

namespace titan::ops {

void ParamModule::replace_parameter(const std::string& name, at::Tensor value) {
  at::Tensor* slot = parameters_.find(name);
  TITAN_CHECK(slot != nullptr, "replace_parameter: module ", this->name(), " has no parameter '",
              name, "'");
  value.set_requires_grad(slot->requires_grad());
  *slot = std::move(value);
  rebind_parameters();
}

}  // namespace titan::ops
