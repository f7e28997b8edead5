// Lab 07 — reference solution.
#include "ring_lab.hpp"

#include <memory>

namespace lab07 {

at::Tensor all_gather_matmul(const at::Tensor& x_shard, const at::Tensor& w, const titan::dist::ProcessGroup& group) {
  const int n = group.size(), r = group.rank();
  const int64_t c = x_shard.size(1);
  at::Tensor out = at::empty({x_shard.size(0), n * c, w.size(0)}, x_shard.options());
  at::Tensor cur = x_shard.contiguous();  // send/recv need contiguous buffers
  for (int k = 0; k < n; ++k) {
    const int64_t j = (r - k + n) % n;  // whose chunk `cur` is: it came k hops from the left
    std::shared_ptr<titan::dist::PendingWork> send, recv;
    at::Tensor next;
    if (k + 1 < n) {
      // Start the transfer first, so that it runs under this step's matmul.
      // `cur` must stay alive (and unchanged) until send->wait().
      next = at::empty_like(cur);
      send = group.send_async(cur, (r + 1) % n, /*tag=*/k + 1);
      recv = group.recv_async(next, (r + n - 1) % n, /*tag=*/k + 1);
    }
    out.narrow(1, j * c, c).copy_(chunk_matmul(cur, w));
    if (send) {
      recv->wait();
      send->wait();
      cur = next;
    }
  }
  return out;
}

}  // namespace lab07
