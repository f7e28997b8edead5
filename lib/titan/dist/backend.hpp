#pragma once
/// @file
/// @brief Creates the c10d engine behind a ProcessGroup: Gloo for CPU
/// tensors, NCCL for CUDA tensors, or the fake one that plays a rank of a
/// larger job without communicating.
///
/// These are the only places that include ProcessGroupGloo.hpp (which needs
/// gloo's headers) and ProcessGroupNCCL.hpp (which needs nccl.h), so the rest
/// of titan compiles against c10d::Backend alone.

#include <chrono>
#include <string>

#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace titan::dist {

/// @brief Gloo backend over `store` (already prefixed for this group).
/// `hostname` is the address its sockets bind to ("127.0.0.1" for emulation);
/// an empty one lets Gloo resolve this machine's name (multi-node). When
/// GLOO_SOCKET_IFNAME is set that interface wins, as in torch.distributed.
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& hostname);

/// @brief NCCL backend bound to `device` (a CUDA device). Throws titan::Error
/// in a build without CUDA sources (TITAN_WITH_CUDA=OFF or no nvcc).
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const c10::Device& device);

/// @brief A backend that communicates nothing ([comm] mode = "fake_backend"):
/// every collective returns at once, its output computed as if each of the
/// `size` peers held what this rank holds (an all-gather repeats the input,
/// a SUM multiplies by `size`, MAX and MIN keep it); receives read ones.
c10::intrusive_ptr<c10d::Backend> make_fake_backend(int rank, int size);

/// @brief True when this build can create NCCL backends.
bool nccl_available();

/// @brief The NCCL library torch loaded, as NCCL numbers its versions
/// (major·10000 + minor·100 + patch: 22809 for 2.28.9); 0 in a build
/// without NCCL.
int nccl_version();

}  // namespace titan::dist
