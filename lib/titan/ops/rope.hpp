#pragma once
/// @file
/// @brief Rotary position embedding (RoPE, Su et al. 2021) with Llama 3.1's
/// long-context frequency scaling.

#include <ATen/ATen.h>

#include <cstdint>

namespace titan::ops {

/// @brief Llama 3.1's "rope_scaling": long wavelengths are slowed down by
/// `factor`, short ones kept, and the band in between interpolated smoothly,
/// so that a model trained at original_max_position tokens extends further.
struct RopeScaling {
  bool enabled = true;                   ///< false: plain RoPE (Llama 2 style)
  double factor = 8.0;                   ///< divisor for low frequencies
  double low_freq_factor = 1.0;          ///< wavelengths above original/low are scaled
  double high_freq_factor = 4.0;         ///< wavelengths below original/high are kept
  int64_t original_max_position = 8192;  ///< context length the base model was trained at
};

/// @brief The rotation angles, fp32 [max_seq_len, head_dim / 2]: angle[t, i] =
/// t · freq_i with freq_i = theta^(-2i / head_dim), scaled as `scaling` says.
/// Computed in fp32 on the CPU like torchtitan's precompute_freqs_cis, so every
/// device sees the same table.
at::Tensor rope_angles(int64_t head_dim, int64_t max_seq_len, double theta,
                       const RopeScaling& scaling);

/// @brief cos and sin of rope_angles, kept together and moved to a device once.
struct RopeTable {
  at::Tensor cos;  ///< [max_seq_len, head_dim / 2], fp32
  at::Tensor sin;  ///< [max_seq_len, head_dim / 2], fp32
};

/// Builds the cos/sin table on `device` (computed on the CPU, then copied).
RopeTable make_rope_table(int64_t head_dim, int64_t max_seq_len, double theta,
                          const RopeScaling& scaling, at::Device device);

/// @brief Rotates x [batch, seq, heads, head_dim] by the angles of positions
/// 0..seq-1, pairing channels (2i, 2i+1) — the interleaved layout of Meta's and
/// torchtitan's checkpoints (view_as_complex on the last dim), not HF's
/// rotate_half layout.
///
/// `cos`/`sin` are [seq, head_dim / 2] (a prefix of the table, or the rows of
/// the positions this rank holds), or [batch, seq, head_dim / 2] when every
/// sequence has positions of its own (document masking: positions restart
/// at 0 with each document). The rotation is done in fp32 and the result
/// cast back to x's dtype, as torchtitan does.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

/// Throws titan::Error naming the shapes unless x is [batch, seq, heads,
/// head_dim] and cos/sin are tables apply_rope takes for it.
void check_rope_tables(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace titan::ops
