#pragma once
/// @file
/// @brief How long PendingWork::wait lets c10d::Work::wait block, by backend.

#include <chrono>
#include <string>

namespace titan::dist {

/// @brief The timeout to pass to c10d::Work::wait for a work of the backend
/// named `backend_name` ("gloo", "nccl", ...) in a group whose collectives
/// time out after `group_timeout`.
///
/// - NCCL: no timeout (c10d kNoTimeout, 0 ms). ProcessGroupNCCL's WorkNCCL::wait with an
///   explicit timeout polls on the host until the kernel has finished (torch
///   2.11: "it will block the CPU thread until the NCCL work is completed"),
///   a host-device sync per TP/SP collective, FSDP unshard and
///   reduce-scatter, DDP bucket and PP batch. Without one it only makes the
///   current stream wait for the NCCL stream, and the host runs on to queue
///   the next kernels. Hangs are still caught: the group was built with
///   Options::timeout = group_timeout, and its watchdog aborts a collective
///   that outlives it.
/// - Every other backend (Gloo): `group_timeout`, as before. Gloo's works run
///   on the host, so wait() has to block anyway, and its timeout is what turns
///   a dead peer into titan's one-line error.
std::chrono::milliseconds work_wait_timeout(const std::string& backend_name, std::chrono::milliseconds group_timeout);

}  // namespace titan::dist
