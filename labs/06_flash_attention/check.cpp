// Lab 06 checker: your merge (merge.cpp) against attention over all the
// keys at once, computed here in fp64 as softmax(Q Kᵀ / √D) V with an
// explicit mask. The partial results are made the same way over each part
// of the keys.
//   halves:  the keys split in two equal halves, no mask
//   uneven:  a 1 : 4 split, causal mask
//   masked:  causal, the second part holds only keys after some queries
//            (those rows see none of it: lse = −inf there, out = 0), and
//            rows that see neither part (the merge must give −inf, not NaN)
//   tiles:   eight tiles merged one by one, as a flash kernel's loop does
// The merged out and lse must match to 1e-12 (fp64; measured ~1e-16).
//
//   labs/check.sh 06           (builds lab06_check from starter/ and runs it)
//   build/bin/lab06_check --nproc 1
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "lab_check.hpp"
#include "merge.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/program.hpp"
#include "titan/metrics/format.hpp"
#include "titan/util/strprintf.hpp"

using namespace titan;

namespace {

struct Qkv {
  at::Tensor q, k, v;  // [B, H, S, D] fp64
};

Qkv make(uint64_t seed, int64_t s) {
  const int64_t b = 2, h = 3, d = 16;
  return {lab::seeded(seed, {b, h, s, d}).to(at::kDouble), lab::seeded(seed + 1, {b, h, s, d}).to(at::kDouble),
          lab::seeded(seed + 2, {b, h, s, d}).to(at::kDouble)};
}

// Attention of every query over keys [begin, end), causal or not: the
// partial result a merge consumes (rows that see no key: lse −inf, out 0).
lab06::Partial partial(const Qkv& x, int64_t begin, int64_t end, bool causal) {
  const int64_t s = x.q.size(2), d = x.q.size(3);
  at::Tensor scores = at::matmul(x.q, x.k.narrow(2, begin, end - begin).transpose(-1, -2)) / std::sqrt(double(d));
  if (causal) {
    const at::Tensor qi = at::arange(s, at::kLong).unsqueeze(1), kj = at::arange(begin, end, at::kLong).unsqueeze(0);
    scores = scores.masked_fill(kj > qi, -std::numeric_limits<double>::infinity());
  }
  at::Tensor lse = at::logsumexp(scores, -1);
  at::Tensor p = at::exp(scores - lse.unsqueeze(-1));
  p = at::where(at::isnan(p), at::zeros_like(p), p);  // rows with no key: exp(−inf − −inf)
  at::Tensor out = at::matmul(p, x.v.narrow(2, begin, end - begin));
  return {out, lse};
}

// The largest difference of out and of lse (−inf must match −inf).
double diff(const lab06::Partial& got, const lab06::Partial& want) {
  if (!got.out.defined() || !got.lse.defined() || got.out.sizes() != want.out.sizes() ||
      got.lse.sizes() != want.lse.sizes())
    return INFINITY;
  const at::Tensor both_inf = at::isinf(got.lse) & at::isinf(want.lse) & (got.lse < 0) & (want.lse < 0);
  const at::Tensor dl = at::where(both_inf, at::zeros_like(want.lse), (got.lse - want.lse).abs());
  if (at::isnan(got.out).any().item<bool>() || at::isnan(dl).any().item<bool>()) return INFINITY;
  return std::max((got.out - want.out).abs().max().item<double>(), dl.max().item<double>());
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int, char**) {
    dist::init_distributed({.device = "cpu"});
    const double tol = 1e-12;
    {
      const Qkv x = make(60, 64);
      const double e = diff(lab06::merge(partial(x, 0, 32, false), partial(x, 32, 64, false)), partial(x, 0, 64, false));
      lab::report(e < tol, "halves", titan::strprintf("two halves of 64 keys, no mask: max difference %.3g", e));
    }
    {
      const Qkv x = make(61, 80);
      const double e = diff(lab06::merge(partial(x, 0, 16, true), partial(x, 16, 80, true)), partial(x, 0, 80, true));
      lab::report(e < tol, "uneven", titan::strprintf("16 + 64 keys, causal: max difference %.3g", e));
    }
    {
      // Keys 40..63 lie after queries 0..39: those rows see none of part b.
      const Qkv x = make(62, 64);
      const lab06::Partial a = partial(x, 0, 40, true), b = partial(x, 40, 64, true);
      const double e = diff(lab06::merge(a, b), partial(x, 0, 64, true));
      const double e_swapped = diff(lab06::merge(b, a), partial(x, 0, 64, true));
      // Keys 40..51 and 52..63: rows 0..39 see neither part (lse −inf, out 0 in the merge too).
      const double e_empty = diff(lab06::merge(partial(x, 40, 52, true), partial(x, 52, 64, true)),
                                  partial(x, 40, 64, true));
      const double worst = std::max({e, e_swapped, e_empty});
      lab::report(worst < tol, "masked",
                  titan::strprintf("causal, part b empty for 40 of 64 rows (lse = -inf), both orders, and rows "
                                     "empty in both parts: max difference %.3g",
                                     worst));
    }
    {
      const Qkv x = make(63, 128);
      lab06::Partial acc = partial(x, 0, 16, true);
      for (int64_t t = 16; t < 128; t += 16) acc = lab06::merge(acc, partial(x, t, t + 16, true));
      const double e = diff(acc, partial(x, 0, 128, true));
      lab::report(e < tol, "tiles", titan::strprintf("8 tiles of 16 keys merged in turn, causal: max difference %.3g", e));
    }
    return lab::finish();
  });
}
