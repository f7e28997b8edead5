// Lab 10 — the reference solution.
#include "block_flops.hpp"

namespace lab10 {

double block_matmul_flops(const titan::models::llama3::ModelArgs& a, int64_t tokens) {
  const double D = static_cast<double>(a.dim), H = static_cast<double>(a.n_heads);
  const double KV = static_cast<double>(a.kv_heads());
  const double Q = D / H, F = static_cast<double>(a.ffn_hidden_dim());
  const double weights = D * H * Q + 2 * D * KV * Q + H * Q * D + 3 * D * F;
  // 2 FLOPs per weight per token forward, 4 backward (dX and dW).
  return 6 * weights * static_cast<double>(tokens);
}

double block_attention_flops(const titan::models::llama3::ModelArgs& a, int64_t batch, int64_t seq_len) {
  const double H = static_cast<double>(a.n_heads), Q = static_cast<double>(a.dim / a.n_heads);
  const double T = static_cast<double>(seq_len), B = static_cast<double>(batch);
  const double forward = 2 * (2 * T * Q) * T * H * B;  // QKᵀ and scores·V
  return 3 * forward;                                  // + backward (2x)
}

}  // namespace lab10
