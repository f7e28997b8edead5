// Stands in for backend_nccl.cpp in builds without CUDA sources, so that
// asking for NCCL is a clear error instead of a link failure.
#include "titan/dist/backend.hpp"
#include "titan/util/error.hpp"

namespace titan::dist {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int,
                                                    int, std::chrono::milliseconds,
                                                    const c10::Device&) {
  throw Error(
      "NCCL needs a CUDA build of titan: configure with a CUDA LibTorch and nvcc "
      "(TITAN_WITH_CUDA=AUTO or ON)");
}

bool nccl_available() { return false; }

int nccl_version() { return 0; }

}  // namespace titan::dist
