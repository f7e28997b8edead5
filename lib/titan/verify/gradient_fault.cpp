#include "titan/verify/gradient_fault.hpp"

#include <cstdlib>
#include <string>

#include "titan/dist/launch_env.hpp"

namespace titan::verify {

std::function<void(const std::vector<at::Tensor>&)> gradient_fault_from_env() {
  const char* spec_env = std::getenv("TITAN_FAULT_SCALE_GRADS");
  if (spec_env == nullptr || *spec_env == '\0') return {};
  const dist::LaunchEnv env = dist::read_launch_env();
  const std::string spec(spec_env);
  const size_t colon = spec.find(':');
  if (env.world_size <= 1 || colon == std::string::npos || std::atoi(spec.substr(0, colon).c_str()) != env.rank)
    return {};
  const double factor = std::atof(spec.substr(colon + 1).c_str());
  return [factor](const std::vector<at::Tensor>& trained) {
    for (const at::Tensor& p : trained)
      if (p.grad().defined()) p.grad().mul_(factor);
  };
}

}  // namespace titan::verify
