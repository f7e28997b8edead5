#include "titan/ops/rope.hpp"

#include <cmath>

#include "titan/util/error.hpp"

namespace titan::ops {

at::Tensor rope_angles(int64_t head_dim, int64_t max_seq_len, double theta,
                       const RopeScaling& scaling) {
  TITAN_CHECK(head_dim > 0 && head_dim % 2 == 0, "RoPE: head_dim must be even and positive, got ",
              head_dim);
  TITAN_CHECK(max_seq_len > 0, "RoPE: max_seq_len must be positive, got ", max_seq_len);
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  // freq_i = 1 / theta^(2i/d), in fp32 exactly as the Python reference computes it
  // (arange as int64, cast to float, divided by d).
  at::Tensor exponent = at::arange(0, head_dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(head_dim);
  at::Tensor freqs = 1.0 / at::pow(theta, exponent);
  if (scaling.enabled) {
    const double original = static_cast<double>(scaling.original_max_position);
    const double low_freq_wavelen = original / scaling.low_freq_factor;
    const double high_freq_wavelen = original / scaling.high_freq_factor;
    at::Tensor wavelen = 2.0 * M_PI / freqs;
    // Long wavelengths (they never complete a turn within the original context)
    // are stretched by `factor`; short ones are left alone; in between, a
    // linear blend of the two so that the spectrum stays continuous.
    at::Tensor scaled = at::where(wavelen > low_freq_wavelen, freqs / scaling.factor, freqs);
    at::Tensor smooth = (original / wavelen - scaling.low_freq_factor) /
                        (scaling.high_freq_factor - scaling.low_freq_factor);
    at::Tensor blended = (1.0 - smooth) * scaled / scaling.factor + smooth * scaled;
    at::Tensor medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
    freqs = at::where(medium, blended, scaled);
  }
  at::Tensor t = at::arange(max_seq_len, at::kLong).to(at::kFloat);
  return at::outer(t, freqs).to(f32);
}

RopeTable make_rope_table(int64_t head_dim, int64_t max_seq_len, double theta,
                          const RopeScaling& scaling, at::Device device) {
  at::Tensor angles = rope_angles(head_dim, max_seq_len, theta, scaling);
  return {angles.cos().to(device), angles.sin().to(device)};
}

void check_rope_tables(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  TITAN_CHECK(x.dim() == 4 && x.size(3) % 2 == 0,
              "apply_rope: expected [batch, seq, heads, head_dim] with an even head_dim, got ", x.sizes());
  const int64_t batch = x.size(0), seq = x.size(1), half = x.size(3) / 2;
  const bool per_sequence = cos.dim() == 3;
  TITAN_CHECK(per_sequence ? (cos.size(0) == batch && cos.size(1) == seq && cos.size(2) == half)
                           : (cos.dim() == 2 && cos.size(0) == seq && cos.size(1) == half),
              "apply_rope: table is ", cos.sizes(), " but x needs [", seq, ", ", half, "] or [", batch, ", ", seq,
              ", ", half, "]");
  TITAN_CHECK(sin.sizes() == cos.sizes(), "apply_rope: sin ", sin.sizes(), " and cos ", cos.sizes(), " differ");
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  check_rope_tables(x, cos, sin);
  const int64_t batch = x.size(0), seq = x.size(1), half = x.size(3) / 2;
  const bool per_sequence = cos.dim() == 3;
  // x viewed as pairs (re, im) = (x[2i], x[2i+1]); (re + i·im)·(cos + i·sin).
  at::Tensor pairs = x.to(at::kFloat).unflatten(-1, {half, 2});
  at::Tensor re = pairs.select(-1, 0), im = pairs.select(-1, 1);
  // [seq, half] -> [1, seq, 1, half] to broadcast over batch and heads
  // ([batch, seq, half] -> [batch, seq, 1, half]: over heads only).
  const int64_t b = per_sequence ? batch : 1;
  at::Tensor c = cos.reshape({b, seq, 1, half}), s = sin.reshape({b, seq, 1, half});
  at::Tensor out = at::stack({re * c - im * s, re * s + im * c}, -1);
  return out.flatten(-2).to(x.scalar_type());
}

}  // namespace titan::ops
