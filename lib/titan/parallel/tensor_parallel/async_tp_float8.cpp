// Async TP's two rings with float8 GEMMs: what torch's micro-pipeline TP
// does with fused_all_gather_scaled_matmul and
// fused_scaled_matmul_reduce_scatter when torchao's float8 Linears meet
// async TP under torch.compile.
//
// Why the chunked form computes what synchronous float8 TP computes: a
// tensorwise scale is one number for the whole tensor, taken from the amax
// over the TP group. Cast with that number, each element's float8 value is
// the same whether the tensor is cast whole or chunk by chunk, and a GEMM's
// rows do not depend on the other rows. So
//
//   all-gather → matmul: cast this rank's x chunk with the amax of the whole
//     input, pass float8 chunks round the ring (1 byte per element instead
//     of 2 or 4), scaled_mm each chunk against every consumer's e4m3
//     weight. Backward: each output gradient is cast to e5m2 (amax over the
//     group, as the sync backward takes it), the input gradient is the
//     reduce-scatter ring of Σᵢ gᵢ·Wᵢ per chunk, dWᵢ = gᵢᵀ · the gathered
//     float8 input.
//   matmul → reduce-scatter: cast a and W once (amax over the group), each
//     chunk's partial is a scaled_mm of a's rows. Backward: this rank's
//     chunk of the output gradient is cast to e5m2 with the amax of the
//     whole gradient, the e5m2 chunks go round the ring, each one's input
//     gradient is a scaled_mm against W; dW = the gathered gradientᵀ · a.
//
// Results equal synchronous float8 TP up to the fp32 summation order of
// the ring's reduction (tests/parallel/test_float8_tp.cpp measures it).

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "titan/dist/process_group.hpp"
#include "titan/parallel/float8/float8_linear.hpp"
#include "titan/parallel/tensor_parallel/async_tp.hpp"
#include "titan/parallel/tensor_parallel/async_tp_ring.hpp"
#include "titan/util/error.hpp"

namespace titan::tp {
namespace {

using float8::column_major;
using float8::Scaled;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// [b, c, k] float8 rows times the column-major [k, o] weight: [b, c, o].
at::Tensor chunk_mm(const at::Tensor& rows, const at::Tensor& rows_scale, const Scaled& b_colmajor,
                    at::ScalarType out, bool fast_accum) {
  const int64_t b = rows.size(0), c = rows.size(1);
  at::Tensor y = float8::scaled_mm(Scaled{rows.reshape({b * c, rows.size(2)}), rows_scale}, b_colmajor, out, fast_accum);
  return y.view({b, c, y.size(1)});
}

const dist::ProcessGroup* amax_group_of(AutogradContext* ctx) {
  return reinterpret_cast<const dist::ProcessGroup*>(ctx->saved_data["amax_group"].toInt());
}

// The weights' e4m3 casts travel into forward as a pointer (a Function
// takes no struct arguments); they are saved as tensors for backward.
// `kept` (as AllGatherMatmulFn's): per-op activation checkpointing's outputs
// of the first pass; the ring then gathers x's float8 cast (what backward
// needs) and runs no GEMM.
struct Float8AllGatherMatmulFn : torch::autograd::Function<Float8AllGatherMatmulFn> {
  static tensor_list forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList weights, int64_t group,
                             int64_t amax_group, int64_t casts, std::string label, int64_t kept) {
    const auto& g = detail::group_of(group);
    const auto& wq = *reinterpret_cast<const std::vector<Scaled>*>(casts);
    const Scaled xq = float8::scale_tensorwise(x, at::kFloat8_e4m3fn, reinterpret_cast<const dist::ProcessGroup*>(amax_group));
    const int64_t c = x.size(1);
    std::vector<at::Tensor> ys(weights.size());
    at::Tensor gathered_q;
    if (kept) {
      ys = *reinterpret_cast<const std::vector<at::Tensor>*>(kept);
      gathered_q = detail::ring_all_gather(xq.data, g, label + " (gather only)", [](int64_t, const at::Tensor&) {});
    } else {
      for (size_t i = 0; i < weights.size(); ++i)
        ys[i] = at::empty({x.size(0), g.size() * c, weights[i].size(0)}, x.options());
      gathered_q = detail::ring_all_gather(xq.data, g, label, [&](int64_t j, const at::Tensor& chunk) {
        for (size_t i = 0; i < weights.size(); ++i)
          ys[i].narrow(1, j * c, c).copy_(
              chunk_mm(chunk, xq.scale, Scaled{wq[i].data.t(), wq[i].scale}, x.scalar_type(), /*fast_accum=*/true));
      });
    }
    tensor_list saved{gathered_q, xq.scale};
    for (const Scaled& w : wq) {
      saved.push_back(w.data);
      saved.push_back(w.scale);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["g"] = group;
    ctx->saved_data["amax_group"] = amax_group;
    ctx->saved_data["label"] = label;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(weights[0].scalar_type());
    // What the module's body sees: the gathered input, as its float8
    // values (the consumers take their precomputed outputs and never read it).
    at::Tensor gathered = (gathered_q.to(at::kFloat) / xq.scale).to(x.scalar_type());
    ctx->mark_non_differentiable({gathered});
    tensor_list out{gathered};
    out.insert(out.end(), ys.begin(), ys.end());
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Scaled xq{saved[0], saved[1]};
    const size_t m = (saved.size() - 2) / 2;
    const auto& g = detail::group_of(ctx->saved_data["g"].toInt());
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    const std::string label = ctx->saved_data["label"].toStringRef() + " (backward)";
    const int64_t b = xq.data.size(0), s = xq.data.size(1), d = xq.data.size(2), c = s / g.size();
    std::vector<Scaled> gq(m), wq_cols(m);
    for (size_t i = 0; i < m; ++i) {
      const Scaled wq{saved[2 + 2 * i], saved[3 + 2 * i]};
      const at::Tensor gy = grads[i + 1].defined()
                                ? grads[i + 1].contiguous()
                                : at::zeros({b, s, wq.data.size(0)}, xq.data.options().dtype(x_dtype));
      gq[i] = float8::scale_tensorwise(gy, at::kFloat8_e5m2, amax_group_of(ctx));
      wq_cols[i] = Scaled{column_major(wq.data), wq.scale};
    }
    // Only the gradients autograd asks for (a zero-bubble I wants dx alone,
    // its W the weights' alone; the casts above, whose amax all-reduce every
    // rank runs either way, serve both).
    // dx: Σᵢ gᵢ·Wᵢ per chunk, reduce-scattered round the ring.
    at::Tensor dx;
    if (ctx->needs_input_grad(0))
      dx = detail::ring_reduce_scatter(
          [&](int64_t j) {
            at::Tensor p;
            for (size_t i = 0; i < m; ++i) {
              at::Tensor t = chunk_mm(gq[i].data.narrow(1, j * c, c), gq[i].scale, wq_cols[i], x_dtype,
                                      /*fast_accum=*/false);
              p = p.defined() ? p.add_(t) : t;
            }
            return p;
          },
          g, label);
    tensor_list out{dx};
    const Scaled x_cols{column_major(xq.data.reshape({b * s, d})), xq.scale};
    for (size_t i = 0; i < m; ++i) {
      if (!ctx->needs_input_grad(1 + i)) {
        out.push_back(at::Tensor());
        continue;
      }
      const at::Tensor g2 = gq[i].data.reshape({b * s, gq[i].data.size(2)});
      out.push_back(float8::scaled_mm(Scaled{g2.t().contiguous(), gq[i].scale}, x_cols, w_dtype, /*fast_accum=*/false));
    }
    for (int k = 0; k < 5; ++k) out.push_back(at::Tensor());  // group, amax_group, casts, label, kept
    return out;
  }
};

// `kept` (as MatmulReduceScatterFn's): the reduce-scattered output of the
// first pass; only a's float8 cast (backward's) is made again.
struct Float8MatmulReduceScatterFn : torch::autograd::Function<Float8MatmulReduceScatterFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& w, int64_t group,
                            int64_t amax_group, int64_t cast, std::string label, int64_t kept) {
    const auto& g = detail::group_of(group);
    const Scaled& wq = *reinterpret_cast<const Scaled*>(cast);
    const int64_t s = a.size(1);
    TITAN_CHECK(s % g.size() == 0, "async TP: sequence length ", s, " does not divide by ", g.size(), " ranks");
    const int64_t c = s / g.size();
    const Scaled aq = float8::scale_tensorwise(a, at::kFloat8_e4m3fn, reinterpret_cast<const dist::ProcessGroup*>(amax_group));
    const Scaled w_t{wq.data.t(), wq.scale};
    at::Tensor y = kept ? *reinterpret_cast<const at::Tensor*>(kept)
                        : detail::ring_reduce_scatter(
                              [&](int64_t j) {
                                return chunk_mm(aq.data.narrow(1, j * c, c), aq.scale, w_t, a.scalar_type(),
                                                /*fast_accum=*/true);
                              },
                              g, label);
    ctx->save_for_backward({aq.data, aq.scale, wq.data, wq.scale});
    ctx->saved_data["g"] = group;
    ctx->saved_data["amax_group"] = amax_group;
    ctx->saved_data["label"] = label;
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Scaled aq{saved[0], saved[1]}, wq{saved[2], saved[3]};
    const auto& g = detail::group_of(ctx->saved_data["g"].toInt());
    const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    const std::string label = ctx->saved_data["label"].toStringRef() + " (backward)";
    const int64_t b = aq.data.size(0), s = aq.data.size(1), k = aq.data.size(2), c = s / g.size();
    const int64_t o = wq.data.size(0);
    const at::ScalarType a_dtype = grads[0].defined() ? grads[0].scalar_type() : w_dtype;
    const at::Tensor gy =
        grads[0].defined() ? grads[0].contiguous() : at::zeros({b, c, o}, aq.data.options().dtype(a_dtype));
    // This rank's chunk, scaled with the amax of the whole gradient.
    const Scaled gq = float8::scale_tensorwise(gy, at::kFloat8_e5m2, amax_group_of(ctx));
    const Scaled w_cols{column_major(wq.data), wq.scale};
    // Only what autograd asks for, as Float8AllGatherMatmulFn: without da
    // the ring only gathers.
    const bool need_da = ctx->needs_input_grad(0);
    at::Tensor da = need_da ? at::empty({b, s, k}, gy.options()) : at::Tensor();
    const at::Tensor gathered = detail::ring_all_gather(
        gq.data, g, need_da ? label : label + " (gather only)", [&](int64_t j, const at::Tensor& chunk) {
          if (need_da)
            da.narrow(1, j * c, c).copy_(chunk_mm(chunk, gq.scale, w_cols, gy.scalar_type(), /*fast_accum=*/false));
        });
    at::Tensor dw;
    if (ctx->needs_input_grad(1)) {
      const at::Tensor g2 = gathered.reshape({b * s, o});
      dw = float8::scaled_mm(Scaled{g2.t().contiguous(), gq.scale},
                             Scaled{column_major(aq.data.reshape({b * s, k})), aq.scale}, w_dtype,
                             /*fast_accum=*/false);
    }
    return {da, dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

std::vector<at::Tensor> float8_all_gather_matmul(const at::Tensor& x_shard, const std::vector<at::Tensor>& weights,
                                                 const std::vector<float8::Scaled>& weights_f8,
                                                 const dist::ProcessGroup* amax_group,
                                                 const dist::ProcessGroup& group, const std::string& label,
                                                 const std::vector<at::Tensor>* kept) {
  TITAN_CHECK(x_shard.dim() == 3 && !weights.empty() && weights.size() == weights_f8.size(),
              "float8_all_gather_matmul: expected x [b, s/n, d] and one float8 cast per weight, got ", x_shard.sizes());
  TITAN_CHECK(!kept || kept->size() == weights.size(), "float8_all_gather_matmul: ", kept ? kept->size() : 0,
              " kept outputs for ", weights.size(), " weights");
  return Float8AllGatherMatmulFn::apply(x_shard.contiguous(), at::TensorList(weights), detail::handle_of(group),
                                        reinterpret_cast<int64_t>(amax_group), reinterpret_cast<int64_t>(&weights_f8),
                                        label, reinterpret_cast<int64_t>(kept));
}

at::Tensor float8_matmul_reduce_scatter(const at::Tensor& a, const at::Tensor& weight, const float8::Scaled& weight_f8,
                                        const dist::ProcessGroup* amax_group, const dist::ProcessGroup& group,
                                        const std::string& label, const at::Tensor* kept) {
  TITAN_CHECK(a.dim() == 3, "float8_matmul_reduce_scatter: expected a [b, s, k], got ", a.sizes());
  return Float8MatmulReduceScatterFn::apply(a.contiguous(), weight, detail::handle_of(group),
                                            reinterpret_cast<int64_t>(amax_group),
                                            reinterpret_cast<int64_t>(&weight_f8), label,
                                            reinterpret_cast<int64_t>(kept));
}

}  // namespace titan::tp
