#include "titan/ops/init.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "titan/util/error.hpp"

namespace titan::ops {

namespace {

double normal_cdf(double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; }

// The uniform range of trunc_normal_'s inverse-CDF sampling.
std::pair<double, double> trunc_normal_uniform_range(double mean, double std, double a, double b) {
  TITAN_CHECK(std > 0, "trunc_normal_: std must be positive, got ", std);
  TITAN_CHECK(a < b, "trunc_normal_: need a < b, got a=", a, " b=", b);
  return {2 * normal_cdf((a - mean) / std) - 1, 2 * normal_cdf((b - mean) / std) - 1};
}

// Uniform draws → truncated normals, elementwise (so the same bits whatever
// piece of a tensor it runs on).
void trunc_normal_transform_(at::Tensor& t, double mean, double std, double a, double b) {
  t.erfinv_();
  t.mul_(std * std::sqrt(2.0));
  t.add_(mean);
  t.clamp_(a, b);
}

// Skips `k` outputs of an mt19937 without computing them: only the state
// words matter, and they change once per 624 outputs (a twist).
void skip_draws(at::mt19937& engine, uint64_t k) {
  at::mt19937_data_pod d = engine.data();
  while (k > 0) {
    // operator() decrements left_ and twists when it reaches 0, so left_ - 1
    // outputs are available without a twist.
    const uint64_t free = static_cast<uint64_t>(d.left_ - 1);
    if (k <= free) {
      d.left_ -= static_cast<int>(k);
      d.next_ += static_cast<uint32_t>(k);
      break;
    }
    d.left_ -= static_cast<int>(free);
    d.next_ += static_cast<uint32_t>(free);
    k -= free;
    engine.set_data(d);
    (void)engine();  // the twist, and its first output
    --k;
    d = engine.data();
  }
  engine.set_data(d);
}

constexpr int64_t kPiece = int64_t{1} << 20;  // elements made at once on the CPU (4 MiB of fp32)

}  // namespace

void trunc_normal_(at::Tensor& tensor, double mean, double std, double a, double b,
                   std::optional<at::Generator> generator) {
  const auto [lo, hi] = trunc_normal_uniform_range(mean, std, a, b);
  at::NoGradGuard no_grad;
  // Uniform on [2·lo-1, 2·hi-1], then erfinv gives a standard normal restricted
  // to [(a-mean)/std, (b-mean)/std] / √2.
  tensor.uniform_(lo, hi, generator);
  trunc_normal_transform_(tensor, mean, std, a, b);
}

void init_(at::Tensor& tensor, const InitRecipe& r) {
  at::NoGradGuard no_grad;
  switch (r.kind) {
    case InitRecipe::Kind::kOnes: tensor.fill_(1.0); break;
    case InitRecipe::Kind::kNormal: tensor.normal_(r.mean, r.std); break;
    case InitRecipe::Kind::kTruncNormal: trunc_normal_(tensor, r.mean, r.std, r.a, r.b); break;
  }
}

uint64_t init_draws(const InitRecipe& r, int64_t numel) {
  switch (r.kind) {
    case InitRecipe::Kind::kOnes: return 0;
    case InitRecipe::Kind::kTruncNormal: return static_cast<uint64_t>(numel);
    case InitRecipe::Kind::kNormal:
      TITAN_CHECK(numel >= 16, "sharded init: a normal init of ", numel, " (< 16) elements has no offset rule");
      return static_cast<uint64_t>(numel) + (numel % 16 != 0 ? 16 : 0);
  }
  return 0;
}

RandomStream::RandomStream(uint64_t seed) : seed_(seed), generator_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

void RandomStream::seek(uint64_t position) {
  auto* impl = generator_.get<at::CPUGeneratorImpl>();
  std::lock_guard<std::mutex> lock(generator_.mutex());
  if (position < position_) {  // back: from the seed again
    impl->set_current_seed(seed_);
    position_ = 0;
  }
  at::mt19937 engine = impl->engine();
  skip_draws(engine, position - position_);
  impl->set_engine(engine);
  position_ = position;
}

namespace {

// One contiguous run [g0, g1) of the global tensor's flat elements, written
// to dst[0 .. g1-g0).
void fill_run(const at::Tensor& dst, int64_t g0, int64_t g1, int64_t numel, const InitRecipe& r, uint64_t first,
              RandomStream& stream) {
  const auto cpu = at::TensorOptions().dtype(at::kFloat);
  switch (r.kind) {
    case InitRecipe::Kind::kOnes: dst.fill_(1.0); return;
    case InitRecipe::Kind::kTruncNormal: {
      const auto [lo, hi] = trunc_normal_uniform_range(r.mean, r.std, r.a, r.b);
      for (int64_t s = g0; s < g1; s += kPiece) {
        const int64_t e = std::min(g1, s + kPiece);
        at::Tensor piece = at::empty({e - s}, cpu);
        stream.seek(first + static_cast<uint64_t>(s));
        piece.uniform_(lo, hi, stream.generator());
        stream.consumed(static_cast<uint64_t>(e - s));
        trunc_normal_transform_(piece, r.mean, r.std, r.a, r.b);
        dst.narrow(0, s - g0, e - s).copy_(piece);
      }
      return;
    }
    case InitRecipe::Kind::kNormal: {
      // Blocks of 16 made by normal_ on whole blocks; with a ragged end the
      // last 16 elements come from 16 draws after the main ones.
      const int64_t tail = numel % 16;
      const int64_t main_end = tail ? numel - 16 : numel;
      for (int64_t s = g0, e = std::min(g1, main_end); s < e;) {
        const int64_t b0 = s / 16 * 16;
        const int64_t b1 = std::min((e + 15) / 16 * 16, b0 + kPiece);
        at::Tensor piece = at::empty({b1 - b0}, cpu);
        stream.seek(first + static_cast<uint64_t>(b0));
        piece.normal_(r.mean, r.std, stream.generator());
        stream.consumed(static_cast<uint64_t>(b1 - b0));
        const int64_t take = std::min(e, b1) - s;
        dst.narrow(0, s - g0, take).copy_(piece.narrow(0, s - b0, take));
        s += take;
      }
      if (tail && g1 > numel - 16) {
        const int64_t s = std::max(g0, numel - 16);
        at::Tensor piece = at::empty({16}, cpu);
        stream.seek(first + static_cast<uint64_t>(numel));
        piece.normal_(r.mean, r.std, stream.generator());
        stream.consumed(16);
        dst.narrow(0, s - g0, g1 - s).copy_(piece.narrow(0, s - (numel - 16), g1 - s));
      }
      return;
    }
  }
}

}  // namespace

void init_box_(at::Tensor& local, at::IntArrayRef global_shape, at::IntArrayRef offsets, const InitRecipe& recipe,
               uint64_t first_draw, RandomStream& stream) {
  const int64_t nd = static_cast<int64_t>(global_shape.size());
  TITAN_CHECK(local.dim() == nd && static_cast<int64_t>(offsets.size()) == nd, "init_box_: a ", local.dim(),
              "-D box with ", offsets.size(), " offsets of a ", nd, "-D tensor");
  TITAN_CHECK(local.is_contiguous(), "init_box_: the box must be contiguous");
  // Values are drawn in fp32 and rounded once into the box's dtype (a bf16
  // model holds the fp32 init rounded, whatever the layout).
  TITAN_CHECK(local.scalar_type() == at::kFloat || local.scalar_type() == at::kBFloat16,
              "init_box_: fp32 or bf16 parameters only, got ", local.scalar_type());
  for (int64_t d = 0; d < nd; ++d)
    TITAN_CHECK(offsets[d] >= 0 && offsets[d] + local.size(d) <= global_shape[d], "init_box_: box dim ", d, " [",
                offsets[d], ", ", offsets[d] + local.size(d), ") is outside 0..", global_shape[d]);
  if (local.numel() == 0) return;
  at::NoGradGuard no_grad;
  int64_t numel = 1;
  std::vector<int64_t> stride(static_cast<size_t>(nd), 1);  // the global tensor's, row-major
  for (int64_t d = nd - 1; d >= 0; --d) {
    stride[static_cast<size_t>(d)] = numel;
    numel *= global_shape[d];
  }
  if (nd == 0) {
    fill_run(local.reshape({1}), 0, 1, 1, recipe, first_draw, stream);
    return;
  }
  // Runs: the box is contiguous in the global tensor from dim j on, where j
  // is the first dim after which the box spans every dim whole.
  int64_t j = nd - 1;
  while (j > 0 && local.size(j) == global_shape[j]) --j;
  const int64_t run = local.size(j) * stride[static_cast<size_t>(j)];
  int64_t runs = 1;
  for (int64_t d = 0; d < j; ++d) runs *= local.size(d);
  at::Tensor flat = local.view({-1});
  // The runs' outer index, as a counter over dims [0, j) of the box.
  std::vector<int64_t> index(static_cast<size_t>(j), 0);
  for (int64_t k = 0; k < runs; ++k) {
    int64_t g = offsets[j] * stride[static_cast<size_t>(j)];
    for (int64_t d = 0; d < j; ++d) g += (offsets[d] + index[static_cast<size_t>(d)]) * stride[static_cast<size_t>(d)];
    fill_run(flat.narrow(0, k * run, run), g, g + run, numel, recipe, first_draw, stream);
    for (int64_t d = j - 1; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < local.size(d)) break;
      index[static_cast<size_t>(d)] = 0;
    }
  }
}

}  // namespace titan::ops
