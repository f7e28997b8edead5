#pragma once
/// @file
/// @brief Weight initialisers LibTorch's C++ API lacks (torch.nn.init.trunc_normal_),
/// and the same initialisers applied to one box of a tensor that no rank
/// holds whole (sharded initialisation).
///
/// Why a box can be initialised exactly: torch's CPU generator is one
/// mt19937 stream of 32-bit draws, and the CPU kernels consume it in a fixed
/// pattern. uniform_ on a contiguous fp32 tensor takes draw i for element i;
/// normal_ (fp32, contiguous, ≥ 16 elements) first takes draw i for element
/// i, then turns each aligned block of 16 into normals (Box-Muller pairs
/// elements j and j+8), and, when numel is not a multiple of 16, draws 16
/// more for the last 16 elements. So the values of any box follow from the
/// tensor's first draw: jump the stream to the box's first element (its
/// block, for normal_) and run the very same kernel on a piece of that
/// length. init_box_() does this; tests compare it bit for bit with the
/// whole-tensor initialisers.

#include <ATen/ATen.h>
#include <ATen/core/Generator.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace titan::ops {

/// @brief Fills `tensor` in place from N(mean, std²) truncated to [a, b]
/// (absolute bounds, like torch.nn.init.trunc_normal_ whose defaults are
/// a = -2, b = 2 — not ±2σ).
///
/// Inverse-CDF sampling, the same steps as PyTorch's Python implementation:
/// draw u ~ U(2Φ(α)-1, 2Φ(β)-1), map through erfinv, scale by std·√2, shift by
/// mean, clamp. Using the same steps and the same generator means the C++ and
/// Python draws are identical for a given seed on the CPU. No autograd
/// recording. On the meta device it only checks the arguments. `generator`:
/// the default generator of the tensor's device when absent.
void trunc_normal_(at::Tensor& tensor, double mean = 0.0, double std = 1.0, double a = -2.0,
                   double b = 2.0, std::optional<at::Generator> generator = std::nullopt);

/// @brief How one parameter starts: torchtitan's Llama 3 uses three kinds.
struct InitRecipe {
  enum class Kind { kOnes, kNormal, kTruncNormal };
  Kind kind = Kind::kOnes;
  double mean = 0.0;
  double std = 1.0;
  double a = -2.0;  ///< truncation bounds (absolute), kTruncNormal only
  double b = 2.0;

  static InitRecipe ones() { return {}; }
  static InitRecipe normal(double mean, double std) { return {Kind::kNormal, mean, std, 0.0, 0.0}; }
  static InitRecipe trunc_normal(double mean, double std, double a = -2.0, double b = 2.0) {
    return {Kind::kTruncNormal, mean, std, a, b};
  }
};

/// @brief Initialises the whole `tensor` by `recipe` from the default
/// generator of its device (what init_weights() does, one parameter).
void init_(at::Tensor& tensor, const InitRecipe& recipe);

/// @brief Draws of torch's CPU generator that init_() of an fp32 tensor of
/// `numel` elements consumes: numel for trunc_normal, numel rounded up by a
/// block of 16 when numel % 16 != 0 for normal, 0 for ones. titan::Error for
/// a normal init of fewer than 16 elements (torch then takes another path,
/// with a cache of Box-Muller pairs, that no offset can reproduce).
uint64_t init_draws(const InitRecipe& recipe, int64_t numel);

/// @brief A position in torch's CPU random stream for one seed: the
/// generator torch.manual_seed(seed) leaves, moved to any draw.
///
/// Moving forward costs about a nanosecond per skipped draw (one mt19937
/// twist per 624 draws, no tempering); moving back restarts from the seed.
class RandomStream {
 public:
  explicit RandomStream(uint64_t seed);
  /// Moves to absolute draw `position` (0 = right after manual_seed).
  void seek(uint64_t position);
  /// Records that a kernel consumed `draws` from the generator.
  void consumed(uint64_t draws) { position_ += draws; }
  uint64_t position() const { return position_; }
  /// The generator at position(), for uniform_/normal_.
  at::Generator& generator() { return generator_; }

 private:
  uint64_t seed_;
  uint64_t position_ = 0;
  at::Generator generator_;
};

/// @brief Initialises `local`, the box of a global tensor of `global_shape`
/// that starts at `offsets` (per dim; local's sizes are the box's extent),
/// with exactly the values init_() of the whole fp32 tensor would give it
/// when its first draw is at `first_draw` of `stream`. `local` may live on
/// any device (values are made on the CPU in pieces of at most a few MiB
/// and copied, so CUDA gets the CPU's bits); it must be contiguous.
/// Boxes of one stream should be filled in increasing `first_draw` order
/// (a step back re-walks the stream from the seed).
void init_box_(at::Tensor& local, at::IntArrayRef global_shape, at::IntArrayRef offsets, const InitRecipe& recipe,
               uint64_t first_draw, RandomStream& stream);

}  // namespace titan::ops
