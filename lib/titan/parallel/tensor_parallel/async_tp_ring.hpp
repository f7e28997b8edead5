#pragma once
/// @file
/// @brief The two rings async TP is made of, with the GEMM left to the
/// caller: async_tp.cpp runs them with high-precision matmuls,
/// async_tp_float8.cpp with float8 ones. Internal to tensor_parallel/.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>

namespace titan::dist {
class ProcessGroup;
}

namespace titan::tp::detail {

/// @brief Passes the sequence chunks x [b, c, ...] of every rank round the
/// ring and returns them gathered, [b, n·c, ...] in x's dtype (float8
/// chunks travel as bytes). `on_chunk(j, chunk)` is called once per chunk j
/// (this rank's own first) while the next chunk is in flight: that is where
/// the caller's matmul overlaps the transfer.
at::Tensor ring_all_gather(const at::Tensor& x, const dist::ProcessGroup& g, const std::string& label,
                           const std::function<void(int64_t j, const at::Tensor& chunk)>& on_chunk);

/// @brief Σ over ranks of `partial(j)` for this rank's sequence chunk j:
/// partial(j) is this rank's share [b, c, ...] of chunk j (a matmul of
/// its rows). Each step receives the running sum of one chunk while the next
/// partial computes, adds, and sends it on.
at::Tensor ring_reduce_scatter(const std::function<at::Tensor(int64_t j)>& partial, const dist::ProcessGroup& g,
                               const std::string& label);

/// @brief The group a handle from handle_of() names (autograd Functions
/// carry it as an integer in saved_data).
const dist::ProcessGroup& group_of(int64_t handle);
int64_t handle_of(const dist::ProcessGroup& g);

}  // namespace titan::tp::detail
