#include "titan/parallel/tensor_parallel/async_tp.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>
#include <optional>

#include "titan/dist/comm_log.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/parallel/tensor_parallel/async_tp_ring.hpp"
#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

std::mutex& events_mutex() {
  static std::mutex mu;
  return mu;
}
std::vector<AsyncTpEvent>& events() {
  static std::vector<AsyncTpEvent> ev;
  return ev;
}
double now_us() { return dist::CommLog::instance().now_us(); }

void record(const std::string& label, const char* kind, int chunk, double t0) {
  std::lock_guard<std::mutex> lock(events_mutex());
  events().push_back({label, kind, chunk, t0, now_us()});
}

// One ring step's transfer: send `cur` right, receive the same shape from
// the left into a fresh buffer.
//
// The send and the receive are posted as one batch (batch_p2p_async, as
// ring attention does): on NCCL that is one ncclGroupStart/End on the
// group's one communicator. Posted apart, as a send_async and then a
// recv_async, ProcessGroupNCCL makes a lazily created 2-rank communicator
// per peer pair, and creating one blocks until both peers join: at tp >= 3
// rank r waits in its send to r+1 while r+1 waits in its send to r+2, a
// cycle around the ring; at tp = 2 an ungrouped send and recv on one stream
// can hang once a message outgrows NCCL's buffers. Gloo has no coalescing:
// batch_p2p_async posts the same send then receive there, so CPU runs and
// their CommLog records are as before.
//
// Float8 chunks (async TP under float8) travel as their bytes: one byte an
// element either way, and no backend has to know the float8 dtypes.
struct RingStep {
  std::vector<std::shared_ptr<dist::PendingWork>> works;
  at::Tensor incoming;
  double issued_us = now_us();
  RingStep(const dist::ProcessGroup& g, const at::Tensor& cur, int tag) {
    const int n = g.size(), r = g.rank();
    incoming = at::empty_like(cur, at::MemoryFormat::Contiguous);
    at::Tensor out = cur.is_contiguous() ? cur : cur.contiguous();
    at::Tensor in = incoming;
    if (at::isFloat8Type(out.scalar_type())) {
      out = out.view(at::kByte);
      in = in.view(at::kByte);
    }
    works = g.batch_p2p_async({{/*is_send=*/true, out, (r + 1) % n, tag}, {/*is_send=*/false, in, (r + n - 1) % n, tag}});
  }
  at::Tensor wait(const std::string& label, int chunk) {
    const double t0 = now_us();
    // Receive first, as before (Gloo gives one work per operation, in the
    // order posted: [send, recv]; NCCL one work for the batch).
    for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
    record(label, "wait", chunk, t0);
    // In flight from issue until the wait returned (an upper bound: the
    // transfer may have finished earlier, which only the wait could tell).
    std::lock_guard<std::mutex> lock(events_mutex());
    events().push_back({label, "transfer", chunk, issued_us, now_us()});
    return incoming;
  }
};

}  // namespace

namespace detail {

const dist::ProcessGroup& group_of(int64_t h) {
  return *reinterpret_cast<const dist::ProcessGroup*>(static_cast<intptr_t>(h));
}
int64_t handle_of(const dist::ProcessGroup& g) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(&g)); }

at::Tensor ring_all_gather(const at::Tensor& x, const dist::ProcessGroup& g, const std::string& label,
                           const std::function<void(int64_t j, const at::Tensor& chunk)>& on_chunk) {
  const int n = g.size(), r = g.rank();
  const int64_t c = x.size(1);
  std::vector<int64_t> shape = x.sizes().vec();
  shape[1] = n * c;
  at::Tensor gathered = at::empty(shape, x.options());
  at::Tensor cur = x.contiguous();
  for (int k = 0; k < n; ++k) {
    const int64_t j = (r - k + n) % n;  // whose chunk `cur` is
    std::optional<RingStep> step;
    if (k + 1 < n) step.emplace(g, cur, k + 1);
    const double t0 = now_us();
    gathered.narrow(1, j * c, c).copy_(cur);
    on_chunk(j, cur);
    record(label, "matmul", k, t0);
    if (step) cur = step->wait(label, k);
  }
  return gathered;
}

at::Tensor ring_reduce_scatter(const std::function<at::Tensor(int64_t j)>& partial, const dist::ProcessGroup& g,
                               const std::string& label) {
  const int n = g.size(), r = g.rank();
  double t0 = now_us();
  at::Tensor acc = partial((r + n - 1) % n).contiguous();
  record(label, "matmul", 0, t0);
  for (int k = 1; k < n; ++k) {
    RingStep step(g, acc, k);
    t0 = now_us();
    at::Tensor p = partial(((r - 1 - k) % n + n) % n);
    record(label, "matmul", k, t0);
    acc = step.wait(label, k).add_(p);
  }
  return acc;
}

}  // namespace detail

namespace {

using detail::group_of;
using detail::handle_of;

// gathered [b, n·c, d] and x_full · Bᵢ (Bᵢ [d, oᵢ]) from this rank's chunk.
std::vector<at::Tensor> ring_all_gather_matmul(const at::Tensor& x, const std::vector<at::Tensor>& bs,
                                               const dist::ProcessGroup& g, const std::string& label) {
  const int64_t c = x.size(1);
  std::vector<at::Tensor> ys;
  for (const at::Tensor& b : bs) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape[1] = g.size() * c;
    shape.back() = b.size(1);
    ys.push_back(at::empty(shape, x.options()));
  }
  at::Tensor gathered = detail::ring_all_gather(x, g, label, [&](int64_t j, const at::Tensor& chunk) {
    for (size_t i = 0; i < bs.size(); ++i) ys[i].narrow(1, j * c, c).copy_(at::matmul(chunk, bs[i]));
  });
  std::vector<at::Tensor> out{gathered};
  out.insert(out.end(), ys.begin(), ys.end());
  return out;
}

// Σᵢ aᵢ · Bᵢ (aᵢ [b, n·c, kᵢ], Bᵢ [kᵢ, o]), summed over ranks, this rank's
// sequence chunk [b, c, o].
at::Tensor ring_matmul_reduce_scatter(const std::vector<at::Tensor>& as, const std::vector<at::Tensor>& bs,
                                      const dist::ProcessGroup& g, const std::string& label) {
  const int n = g.size();
  const int64_t s = as.front().size(1);
  TITAN_CHECK(s % n == 0, "async TP: sequence length ", s, " does not divide by ", n, " ranks");
  const int64_t c = s / n;
  return detail::ring_reduce_scatter(
      [&](int64_t j) {
        at::Tensor p;
        for (size_t i = 0; i < as.size(); ++i) {
          if (!as[i].defined()) continue;
          at::Tensor t = at::matmul(as[i].narrow(1, j * c, c), bs[i]);
          p = p.defined() ? p.add_(t) : t;
        }
        return p;
      },
      g, label);
}

at::Tensor or_zeros(const at::Tensor& g, const at::Tensor& like) { return g.defined() ? g : at::zeros_like(like); }

// `kept`, when not 0, points to the outputs per-op activation checkpointing
// kept from the first pass (one per weight): the ring then only gathers,
// and those outputs come back with this backward (as Float8Matmul's kept).
struct AllGatherMatmulFn : torch::autograd::Function<AllGatherMatmulFn> {
  static tensor_list forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList weights, int64_t group,
                             std::string label, int64_t kept) {
    tensor_list out;
    if (kept) {
      out.push_back(detail::ring_all_gather(x, group_of(group), label + " (gather only)",
                                            [](int64_t, const at::Tensor&) {}));
      for (const at::Tensor& y : *reinterpret_cast<const std::vector<at::Tensor>*>(kept)) out.push_back(y);
    } else {
      std::vector<at::Tensor> bs;
      for (const at::Tensor& w : weights) bs.push_back(w.t());
      out = ring_all_gather_matmul(x, bs, group_of(group), label);
    }
    tensor_list saved{out[0]};
    for (const at::Tensor& w : weights) saved.push_back(w);
    ctx->save_for_backward(saved);
    ctx->saved_data["g"] = group;
    ctx->saved_data["label"] = label;
    ctx->mark_non_differentiable({out[0]});
    return out;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& gathered = saved[0];
    const auto& g = group_of(ctx->saved_data["g"].toInt());
    const std::string label = ctx->saved_data["label"].toStringRef() + " (backward)";
    std::vector<at::Tensor> gy, ws;
    for (size_t i = 1; i < saved.size(); ++i) {
      ws.push_back(saved[i]);
      std::vector<int64_t> ys = gathered.sizes().vec();
      ys.back() = saved[i].size(0);
      gy.push_back(grads[i].defined() ? grads[i] : at::zeros(ys, gathered.options()));
    }
    // Only what autograd asks for: a zero-bubble schedule's I step wants dx
    // alone and its W step the weights' alone (pipeline/split_backward.hpp),
    // so neither runs the other's ring or GEMMs.
    // dx: Σᵢ dYᵢ · Wᵢ, reduce-scattered on the sequence (overlapped too).
    at::Tensor dx = ctx->needs_input_grad(0) ? ring_matmul_reduce_scatter(gy, ws, g, label) : at::Tensor();
    tensor_list out{dx};
    const at::Tensor x2 = gathered.flatten(0, -2);
    for (size_t i = 0; i < gy.size(); ++i)
      out.push_back(ctx->needs_input_grad(1 + i) ? gy[i].flatten(0, -2).t().matmul(x2) : at::Tensor());
    out.push_back(at::Tensor());
    out.push_back(at::Tensor());
    out.push_back(at::Tensor());
    return out;
  }
};

// `kept` as AllGatherMatmulFn's: the reduce-scattered output of the first
// pass, handed back without the ring (torchtitan's op policy keeps
// reduce_scatter's output too).
struct MatmulReduceScatterFn : torch::autograd::Function<MatmulReduceScatterFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& w, int64_t group,
                            std::string label, int64_t kept) {
    ctx->save_for_backward({a, w});
    ctx->saved_data["g"] = group;
    ctx->saved_data["label"] = label;
    if (kept) return *reinterpret_cast<const at::Tensor*>(kept);
    return ring_matmul_reduce_scatter({a}, {w.t()}, group_of(group), label);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& a = saved[0];
    const at::Tensor& w = saved[1];
    const auto& g = group_of(ctx->saved_data["g"].toInt());
    const std::string label = ctx->saved_data["label"].toStringRef() + " (backward)";
    std::vector<int64_t> ys = a.sizes().vec();
    ys[1] /= g.size();
    ys.back() = w.size(0);
    const at::Tensor gy = grads[0].defined() ? grads[0].contiguous() : at::zeros(ys, a.options());
    // da = all_gather(dY) · W; dW = all_gather(dY)ᵀ · a. Only what autograd
    // asks for (as AllGatherMatmulFn): a W step without da gathers dY alone.
    at::Tensor gathered, da;
    if (ctx->needs_input_grad(0)) {
      auto out = ring_all_gather_matmul(gy, {w}, g, label);
      gathered = out[0], da = out[1];
    } else {
      gathered = detail::ring_all_gather(gy, g, label + " (gather only)", [](int64_t, const at::Tensor&) {});
    }
    at::Tensor dw = ctx->needs_input_grad(1) ? gathered.flatten(0, -2).t().matmul(a.flatten(0, -2)) : at::Tensor();
    return {da, dw, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

std::vector<at::Tensor> all_gather_matmul(const at::Tensor& x_shard, const std::vector<at::Tensor>& weights,
                                          const dist::ProcessGroup& group, const std::string& label,
                                          const std::vector<at::Tensor>* kept) {
  TITAN_CHECK(x_shard.dim() == 3 && !weights.empty(), "all_gather_matmul: expected x [b, s/n, d] and weights, got ",
              x_shard.sizes());
  TITAN_INTERNAL_ASSERT(!kept || kept->size() == weights.size(), "all_gather_matmul: ", kept ? kept->size() : 0,
                        " kept outputs for ", weights.size(), " weights");
  return AllGatherMatmulFn::apply(x_shard, at::TensorList(weights), handle_of(group), label,
                                  reinterpret_cast<int64_t>(kept));
}

at::Tensor matmul_reduce_scatter(const at::Tensor& a, const at::Tensor& weight, const dist::ProcessGroup& group,
                                 const std::string& label, const at::Tensor* kept) {
  TITAN_CHECK(a.dim() == 3, "matmul_reduce_scatter: expected a [b, s, k], got ", a.sizes());
  return MatmulReduceScatterFn::apply(a, weight, handle_of(group), label, reinterpret_cast<int64_t>(kept));
}

std::vector<AsyncTpEvent> async_tp_events() {
  std::lock_guard<std::mutex> lock(events_mutex());
  return events();
}

void clear_async_tp_events() {
  std::lock_guard<std::mutex> lock(events_mutex());
  events().clear();
}

double async_tp_exposed_us() {
  std::lock_guard<std::mutex> lock(events_mutex());
  double t = 0;
  for (const auto& e : events())
    if (e.kind == "wait") t += e.end_us - e.start_us;
  return t;
}

}  // namespace titan::tp
