// The one translation unit that includes ProcessGroupNCCL.hpp (and so
// nccl.h). Built only when TITAN_HAS_CUDA; backend_nccl_absent.cpp stands in
// for it otherwise.
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "titan/dist/backend.hpp"

namespace titan::dist {
namespace {

// ProcessGroupNCCL::Options embeds an ncclConfig_t whose layout is that of
// the nccl.h compiled here; torch uses it with the NCCL it loaded. A
// different major.minor may have added fields: say so once, loudly, rather
// than let a mismatched layout surface as a crash in the first collective.
void warn_on_nccl_header_mismatch() {
  static std::once_flag once;
  std::call_once(once, [] {
    const auto [major, minor, patch] = c10d::getNcclVersionTuple();
    if (major == NCCL_MAJOR && minor == NCCL_MINOR) return;
    std::fprintf(stderr,
                 "titan: warning: compiled against nccl.h %d.%d.%d but torch loaded NCCL %d.%d.%d; "
                 "ProcessGroupNCCL::Options embeds ncclConfig_t, whose layout may differ: rebuild against the "
                 "nvidia/nccl/include of the torch that runs (cmake/FindTorchFromVenv.cmake)\n",
                 NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, major, minor, patch);
  });
}

// torch's own NCCL flight recorder, on unless the user chose: titan's
// recorder (flight_recorder.hpp) sees an NCCL collective complete when the
// stream waits for it, not when the GPU finishes it, so on NCCL a hang is
// named by torch's, which tracks completion on the device and dumps
// (TORCH_FR_DUMP_TEMP_FILE, default /tmp/nccl_trace_rank_<rank>) when its
// watchdog times a collective out. Set before the first ProcessGroupNCCL,
// which reads them.
void enable_torch_nccl_flight_recorder() {
  if (std::getenv("TORCH_FR_BUFFER_SIZE") == nullptr && std::getenv("TORCH_NCCL_TRACE_BUFFER_SIZE") == nullptr)
    setenv("TORCH_FR_BUFFER_SIZE", "2000", 0);
  setenv("TORCH_NCCL_DUMP_ON_TIMEOUT", "1", 0);
}

}  // namespace

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const c10::Device& device) {
  warn_on_nccl_header_mismatch();
  enable_torch_nccl_flight_recorder();
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  // setBoundDeviceId only records the group's GPU (Backend::bound_device_id_):
  // barrier() then runs on it instead of guessing the device from the rank,
  // and it is what eager init and ncclCommSplit would need. It connects
  // nothing: the communicator is still created at the group's first
  // collective, which blocks until every member reaches it. (Eager connect,
  // eagerConnectSingleDevice, would block here instead, per group, in the
  // order the ranks create groups; we leave it lazy.)
  pg->setBoundDeviceId(device);
  return pg;
}

bool nccl_available() { return true; }

int nccl_version() {
  const auto [major, minor, patch] = c10d::getNcclVersionTuple();
  return major * 10000 + minor * 100 + patch;
}

}  // namespace titan::dist
