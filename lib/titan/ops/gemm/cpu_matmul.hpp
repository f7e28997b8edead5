#pragma once
/// @file
/// @brief Which GEMM titan's Linear runs on fp32 CPU tensors: ATen's
/// (aten::mm, MKL's sgemm in LibTorch's wheel) or oneDNN's matmul
/// (onednn_sgemm.hpp), behind an autograd node whose forward and backward
/// are three GEMMs: y = x·Wᵀ, dx = dy·W, dW = dyᵀ·x.
///
/// A process-wide choice, as torch.backends' flags are: the trainer sets
/// it from `[model] cpu_matmul` (default "auto"; "aten" keeps the GEMM
/// eager PyTorch runs). "auto" takes oneDNN only where it is checked and
/// faster: its plugin loads, its GEMM agrees with float64 on the three
/// products of a Linear (once per process, a few milliseconds), the CPU
/// is not Intel's (MKL, behind aten::mm, picks its kernels by CPU vendor:
/// a generic AVX2 path on AMD, its best on Intel), and oneDNN runs its
/// AVX-512 kernels there (without AVX-512 its jit GEMM is barely faster
/// than MKL's and rounds otherwise; cpu_matmul.cpp says what was measured). Outside a trainer the
/// choice stays ATen's unless something asks.

#include <ATen/core/Tensor.h>

#include <string>

namespace titan::ops {

/// @brief The GEMM behind Linear on fp32 CPU tensors.
enum class CpuMatmul { aten, onednn };

/// @brief Sets the process-wide choice. Throws titan::Error for onednn
/// when oneDNN is not available or fails its check (the message says why).
void set_cpu_matmul(CpuMatmul m);
/// @brief The process-wide choice (aten until set).
CpuMatmul cpu_matmul();
/// @brief "auto" (see above), "onednn" or "aten"; throws titan::Error
/// naming the valid values otherwise, or for "onednn" where oneDNN is not
/// available or fails its check.
CpuMatmul parse_cpu_matmul(const std::string& name);
/// @brief "aten" or "onednn".
const char* cpu_matmul_name(CpuMatmul m);
/// @brief What a run's banner says of the GEMM its fp32 Linear layers run
/// now: "oneDNN", or "aten::mm" followed, when `requested` is "auto", by
/// why "auto" did not take oneDNN (its plugin did not load, its check
/// failed, an Intel CPU, no AVX-512 kernels): on an AMD CPU a run without it trains ~1.7x
/// slower, and should say so.
std::string describe_cpu_matmul(const std::string& requested);

/// @brief x·Wᵀ over x's last dimension (W [out, in]): through oneDNN when
/// the choice is onednn and both are fp32 CPU tensors outside autocast,
/// else at::linear.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight);

/// @brief A·B for 2-D tensors with the GEMM Linear runs now: onednn_mm for
/// fp32 CPU operands when the choice is onednn (outside autocast), else
/// at::mm. For code that computes a Linear's products itself (per-op
/// activation checkpointing's kept-output Linear) and must round as the
/// Linear does.
at::Tensor mm(const at::Tensor& a, const at::Tensor& b);

/// @brief The profiler record of onednn_mm, beside aten::mm in traces.
inline constexpr const char* kOnednnMmRecord = "titan::mm";

/// @brief A·B for 2-D fp32 CPU tensors through oneDNN (strided operands,
/// transposed views included, without copies); recorded in profiler traces
/// as "titan::mm" with A and B as inputs, so that FLOP counts from a trace
/// see it like aten::mm. No autograd.
at::Tensor onednn_mm(const at::Tensor& a, const at::Tensor& b);

}  // namespace titan::ops
