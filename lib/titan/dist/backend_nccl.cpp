// The one translation unit that includes ProcessGroupNCCL.hpp (and so
// nccl.h). Built only when TITAN_HAS_CUDA; backend_nccl_absent.cpp stands in
// for it otherwise.
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "titan/dist/backend.hpp"

namespace titan::dist {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const c10::Device& device) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  // Binding the group to its GPU lets NCCL create the communicator eagerly
  // and lets barrier() know which device to use.
  pg->setBoundDeviceId(device);
  return pg;
}

bool nccl_available() { return true; }

}  // namespace titan::dist
