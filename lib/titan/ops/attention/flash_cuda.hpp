#pragma once
/// @file
/// @brief Flash attention on CUDA GPUs (flash_cuda.cu): the CPU kernel's
/// algorithm on the tensor cores, bf16 or fp16 with fp32 accumulation.
/// Defined only in CUDA builds (TITAN_HAS_CUDA, flash_attention_cuda.cpp);
/// flash_attention_forward/backward (flash_cpu.hpp) call these for CUDA
/// tensors, so callers use one entry point on every device.

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>

#include "titan/ops/attention/flash_cpu.hpp"

namespace titan::ops {

/// @brief The forward on CUDA: q [B, Hq, S, D], k/v [B, Hkv, S_kv, D], all
/// bf16 or all fp16 on one GPU, head_dim 16, 32, 64 or 128; causal,
/// GQA without repeating K/V, and block-causal `doc_start` as
/// flash_attention_forward — or, for one block of a ring, `key_begin` as
/// flash_block_forward (at most one of the two). Returns out (q's dtype)
/// and the fp32 lse; a row that sees no key gets out 0 and lse −inf.
FlashForward flash_attention_forward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                                          std::optional<double> scale, const at::Tensor& doc_start,
                                          const at::Tensor& key_begin = {});

/// @brief The backward on CUDA, as flash_attention_backward: dq (summed in
/// fp32 with atomics, then cast), dk and dv (one thread block per key tile
/// and kv head, summing the group's query heads).
FlashGrads flash_attention_backward_cuda(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                         bool causal, std::optional<double> scale, const at::Tensor& doc_start,
                                         const at::Tensor& key_begin = {});

/// @brief "" when the flash kernels of this head dim (bf16 or fp16) run on
/// CUDA device `device`, else why not (no image for its architecture, too
/// little shared memory per block, a head dim without kernels). Asked once
/// per device, head dim and dtype (ops/cuda_kernels.hpp).
std::string flash_cuda_unavailable(int device, int64_t head_dim, bool bf16);

/// @brief Whether the CUDA kernels take these operands (bf16/fp16, a
/// supported head dim): ring attention's blocks use them then, else math.
bool flash_cuda_supports(const at::Tensor& q);

}  // namespace titan::ops
