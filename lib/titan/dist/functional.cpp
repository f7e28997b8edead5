#include "titan/dist/functional.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "titan/util/error.hpp"

namespace titan::dist::functional {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Groups outlive the autograd graphs that use them (they belong to the World
// or a DeviceMesh), so the graph keeps a plain pointer, stored as an integer
// because saved_data holds IValues.
int64_t to_handle(const ProcessGroup& g) { return reinterpret_cast<intptr_t>(&g); }
const ProcessGroup& from_handle(const c10::IValue& v) {
  return *reinterpret_cast<const ProcessGroup*>(static_cast<intptr_t>(v.toInt()));
}

struct AllReduceFn : torch::autograd::Function<AllReduceFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t g, int64_t op) {
    ctx->saved_data["g"] = g;
    ctx->saved_data["op"] = op;
    at::Tensor y = x.clone(at::MemoryFormat::Contiguous);
    from_handle(g).all_reduce(y, static_cast<ReduceOp>(op));
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    at::Tensor g = grads[0].clone(at::MemoryFormat::Contiguous);
    from_handle(ctx->saved_data["g"]).all_reduce(g, static_cast<ReduceOp>(ctx->saved_data["op"].toInt()));
    return {g, at::Tensor(), at::Tensor()};
  }
};

struct AllGatherFn : torch::autograd::Function<AllGatherFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t g, int64_t dim) {
    ctx->saved_data["g"] = g;
    ctx->saved_data["dim"] = dim;
    return from_handle(g).all_gather(x, dim);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const ProcessGroup& g = from_handle(ctx->saved_data["g"]);
    return {g.reduce_scatter(grads[0], ctx->saved_data["dim"].toInt()), at::Tensor(), at::Tensor()};
  }
};

struct ReduceScatterFn : torch::autograd::Function<ReduceScatterFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t g, int64_t dim, int64_t op) {
    ctx->saved_data["g"] = g;
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["op"] = op;
    return from_handle(g).reduce_scatter(x, dim, static_cast<ReduceOp>(op));
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const ProcessGroup& g = from_handle(ctx->saved_data["g"]);
    at::Tensor full = g.all_gather(grads[0], ctx->saved_data["dim"].toInt());
    // y = (1/n)·Σ x_r for Avg, so each x_r sees 1/n of the gradient.
    if (static_cast<ReduceOp>(ctx->saved_data["op"].toInt()) == ReduceOp::Avg) full = full / g.size();
    return {full, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct AllToAllFn : torch::autograd::Function<AllToAllFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t g, int64_t split_dim,
                            int64_t concat_dim) {
    ctx->saved_data["g"] = g;
    ctx->saved_data["split"] = split_dim;
    ctx->saved_data["concat"] = concat_dim;
    return from_handle(g).all_to_all(x, split_dim, concat_dim);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const ProcessGroup& g = from_handle(ctx->saved_data["g"]);
    return {g.all_to_all(grads[0], ctx->saved_data["concat"].toInt(), ctx->saved_data["split"].toInt()),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct BroadcastFn : torch::autograd::Function<BroadcastFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t g, int64_t root) {
    ctx->saved_data["g"] = g;
    ctx->saved_data["root"] = root;
    at::Tensor y = x.clone(at::MemoryFormat::Contiguous);
    from_handle(g).broadcast(y, static_cast<int>(root));
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const ProcessGroup& g = from_handle(ctx->saved_data["g"]);
    int root = static_cast<int>(ctx->saved_data["root"].toInt());
    at::Tensor gsum = grads[0].clone(at::MemoryFormat::Contiguous);
    g.reduce(gsum, root);
    // Only the root's input reached the outputs; the others' did not.
    if (g.rank() != root) gsum = at::zeros_like(gsum);
    return {gsum, at::Tensor(), at::Tensor()};
  }
};

struct SendFn : torch::autograd::Function<SendFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t g, int64_t dst, int64_t tag) {
    ctx->saved_data["g"] = g;
    ctx->saved_data["dst"] = dst;
    ctx->saved_data["tag"] = tag;
    ctx->saved_data["shape"] = x.sizes().vec();
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["device"] = x.device().str();
    from_handle(g).send(x, static_cast<int>(dst), static_cast<int>(tag));
    return at::zeros({}, x.options());
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list) {
    const ProcessGroup& g = from_handle(ctx->saved_data["g"]);
    at::Tensor grad = at::empty(ctx->saved_data["shape"].toIntVector(),
                                at::TensorOptions()
                                    .dtype(static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt()))
                                    .device(c10::Device(ctx->saved_data["device"].toStringRef())));
    g.recv(grad, static_cast<int>(ctx->saved_data["dst"].toInt()), static_cast<int>(ctx->saved_data["tag"].toInt()));
    return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct RecvFn : torch::autograd::Function<RecvFn> {
  // `anchor` is an empty tensor that requires grad: it gives the received
  // tensor a place in the graph, so that backward reaches this node.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& anchor, const at::Tensor& like,
                            int64_t g, int64_t src, int64_t tag) {
    ctx->saved_data["g"] = g;
    ctx->saved_data["src"] = src;
    ctx->saved_data["tag"] = tag;
    at::Tensor y = at::empty(like.sizes(), like.options().requires_grad(false));
    from_handle(g).recv(y, static_cast<int>(src), static_cast<int>(tag));
    (void)anchor;
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    from_handle(ctx->saved_data["g"]).send(grads[0], static_cast<int>(ctx->saved_data["src"].toInt()),
                                            static_cast<int>(ctx->saved_data["tag"].toInt()));
    return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_reduce(const at::Tensor& x, const ProcessGroup& group, ReduceOp op) {
  TITAN_CHECK(op == ReduceOp::Sum || op == ReduceOp::Avg,
              "functional::all_reduce is differentiable only for Sum and Avg");
  return AllReduceFn::apply(x, to_handle(group), static_cast<int64_t>(op));
}

at::Tensor all_gather(const at::Tensor& x, const ProcessGroup& group, int64_t dim) {
  return AllGatherFn::apply(x, to_handle(group), dim);
}

at::Tensor reduce_scatter(const at::Tensor& x, const ProcessGroup& group, int64_t dim, ReduceOp op) {
  TITAN_CHECK(op == ReduceOp::Sum || op == ReduceOp::Avg,
              "functional::reduce_scatter is differentiable only for Sum and Avg");
  return ReduceScatterFn::apply(x, to_handle(group), dim, static_cast<int64_t>(op));
}

at::Tensor all_to_all(const at::Tensor& x, const ProcessGroup& group, int64_t split_dim, int64_t concat_dim) {
  return AllToAllFn::apply(x, to_handle(group), split_dim, concat_dim);
}

at::Tensor broadcast(const at::Tensor& x, const ProcessGroup& group, int root) {
  return BroadcastFn::apply(x, to_handle(group), static_cast<int64_t>(root));
}

at::Tensor send(const at::Tensor& x, const ProcessGroup& group, int dst, int tag) {
  return SendFn::apply(x, to_handle(group), static_cast<int64_t>(dst), static_cast<int64_t>(tag));
}

at::Tensor recv(const at::Tensor& like, const ProcessGroup& group, int src, int tag) {
  at::Tensor anchor = at::empty({0}, like.options());
  if (like.requires_grad()) anchor.requires_grad_(true);
  return RecvFn::apply(anchor, like.detach(), to_handle(group), static_cast<int64_t>(src),
                       static_cast<int64_t>(tag));
}

}  // namespace titan::dist::functional
