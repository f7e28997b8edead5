#pragma once
/// @file
/// @brief Lab 07: the all-gather → matmul ring of async tensor parallelism.
///
/// Sequence parallelism leaves each rank with a sequence chunk x_r
/// [b, s/n, d]; a column-parallel matmul needs the whole sequence. Instead
/// of all-gathering first and multiplying after (the network idle while
/// the cores compute, and the other way round), pass the chunks around a
/// ring and multiply the chunk in hand while the next one travels:
///
///     step k = 0 .. n−1 on rank r, holding chunk j = (r − k) mod n:
///       start: send it to rank r+1, receive the next from rank r−1
///       Y[:, chunk j] = chunk_matmul(chunk, W)      (overlaps the transfer)
///       wait for both; the received chunk is the one in hand for step k+1
///
/// After n steps every rank has multiplied every chunk, and sent n−1 of
/// them. lib/titan/parallel/tensor_parallel/async_tp.cpp is the library's
/// version (several weights at once, and the reduce-scatter twin).

#include <ATen/ATen.h>

#include <vector>

#include "titan/dist/comm_log.hpp"
#include "titan/dist/process_group.hpp"

namespace lab07 {

/// @brief When one chunk_matmul ran (CommLog clock, microseconds).
struct MatmulSpan {
  double start_us = 0, end_us = 0;
  int64_t rows = 0;  ///< sequence positions in the chunk multiplied
};

/// @brief Every chunk_matmul since the checker last cleared it.
inline std::vector<MatmulSpan>& matmul_spans() {
  static std::vector<MatmulSpan> spans;
  return spans;
}

/// @brief Given: chunk [b, c, d] · Wᵀ (W [o, d]) → [b, c, o]. Use it for
/// every chunk's product: it records when it ran, so that the checker can
/// see the transfers overlap the matmuls.
inline at::Tensor chunk_matmul(const at::Tensor& chunk, const at::Tensor& w) {
  auto& log = titan::dist::CommLog::instance();
  const double t0 = log.now_us();
  at::Tensor y = at::matmul(chunk, w.t());
  matmul_spans().push_back({t0, log.now_us(), chunk.size(1)});
  return y;
}

/// @brief x_shard [b, s/n, d] is this rank's sequence chunk (rank r holds
/// positions [r·s/n, (r+1)·s/n)), w [o, d] the weight. Returns
/// x_full · wᵀ [b, s, o], the whole sequence, on every rank, computed with
/// the ring above (send_async / recv_async; no all_gather). Forward only.
at::Tensor all_gather_matmul(const at::Tensor& x_shard, const at::Tensor& w, const titan::dist::ProcessGroup& group);

}  // namespace lab07
