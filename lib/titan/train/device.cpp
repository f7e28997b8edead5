#include "titan/train/device.hpp"

#include <ATen/Context.h>

#include "titan/dist/world.hpp"
#include "titan/util/error.hpp"

namespace titan::train {

c10::Device resolve_device(const std::string& want, const dist::LaunchEnv& env, int ranks_per_device) {
  const bool cuda = at::hasCUDA();
  if (want == "cpu" || (want == "auto" && !cuda)) return c10::Device(c10::kCPU);
  TITAN_CHECK(want == "cuda" || want == "auto", "[training] device = '", want,
              "' is not one of cpu, cuda, auto");
  TITAN_CHECK(cuda, "[training] device = 'cuda' but no CUDA device is available (use --training.device cpu)");
  return c10::Device(c10::kCUDA, dist::cuda_device_for(env, static_cast<int>(at::getNumGPUs()), ranks_per_device));
}

}  // namespace titan::train
