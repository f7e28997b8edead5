#include "titan/ops/attention/backend.hpp"

#include "titan/ops/attention/document_mask.hpp"
#include "titan/ops/attention/flash_function.hpp"
#include "titan/ops/attention/math_attention.hpp"
#ifdef TITAN_HAS_CUDA
#include "titan/ops/attention/flash_cuda.hpp"
#endif
#include "titan/util/error.hpp"

namespace titan::ops {

const std::vector<std::string>& attention_backend_names() {
  static const std::vector<std::string> names = {"sdpa", "flash", "math"};
  return names;
}

AttentionBackend parse_attention_backend(const std::string& name) {
  if (name == "sdpa") return AttentionBackend::sdpa;
  if (name == "flash") return AttentionBackend::flash;
  if (name == "math") return AttentionBackend::math;
  throw Error("unknown attention backend '" + name + "' (valid: sdpa, flash, math)");
}

std::string to_string(AttentionBackend b) {
  return attention_backend_names().at(static_cast<size_t>(b));
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, AttentionBackend backend,
                     bool causal, std::optional<double> scale, const at::Tensor& doc_start) {
  switch (backend) {
    case AttentionBackend::flash:
#ifdef TITAN_HAS_CUDA
      // A GPU the kernels cannot run on (no image for its architecture, too
      // little shared memory) computes the same attention with SDPA; the
      // trainer's banner says so (flash_cuda_unavailable).
      if (q.is_cuda() && q.dim() == 4 &&
          !flash_cuda_unavailable(q.device().index(), q.size(3), q.scalar_type() != at::kHalf).empty())
        break;
#endif
      // The CUDA kernel multiplies on the tensor cores, in bf16: fp32
      // inputs are cast there and the output cast back (what torch.autocast
      // does to SDPA), so a job without FSDP's bf16 params can use it.
      if (q.is_cuda() && q.scalar_type() == at::kFloat)
        return flash_attention(q.to(at::kBFloat16), k.to(at::kBFloat16), v.to(at::kBFloat16), causal, scale, {},
                               doc_start)
            .to(at::kFloat);
      return flash_attention(q, k, v, causal, scale, {}, doc_start);
    case AttentionBackend::math:
      return math_attention(q, k, v, causal, scale, doc_start);
    case AttentionBackend::sdpa:
      break;
  }
  const int64_t rep = q.size(1) / k.size(1);
  const at::Tensor kr = rep == 1 ? k : k.repeat_interleave(rep, 1);
  const at::Tensor vr = rep == 1 ? v : v.repeat_interleave(rep, 1);
  if (doc_start.defined()) {
    TITAN_CHECK(causal, "attention: document masking (doc_start) is block-causal; it needs causal = true");
    // A boolean mask (true = attend) in place of is_causal.
    return at::scaled_dot_product_attention(q, kr, vr, block_causal_mask(doc_start.to(q.device())), 0.0, false,
                                            scale);
  }
  return at::scaled_dot_product_attention(q, kr, vr, /*attn_mask=*/{}, /*dropout_p=*/0.0, causal, scale);
}

}  // namespace titan::ops
