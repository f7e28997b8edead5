#pragma once
/// @file
/// @brief What every lab checker does the same way: one [PASS]/[FAIL] line
/// per check on rank 0, a summary and the exit code, a maximum over ranks
/// (a check passes only when every rank agrees), seeded tensors that are
/// the same on every rank, and the relative difference the tolerances use.

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "titan/dist/process_group.hpp"
#include "titan/dist/world.hpp"

namespace titan::lab {

namespace detail {
inline int& failures() {
  static int n = 0;
  return n;
}
inline std::string& first_failure() {
  static std::string s;
  return s;
}
}  // namespace detail

/// @brief Records one check and prints it on rank 0 as "[PASS] name: detail".
inline void report(bool ok, const std::string& name, const std::string& detail) {
  if (!ok && detail::first_failure().empty()) detail::first_failure() = name;
  detail::failures() += !ok;
  if (dist::world().rank() == 0) std::printf("[%s] %s: %s\n", ok ? "PASS" : "FAIL", name.c_str(), detail.c_str());
}

/// @brief Prints the summary on rank 0 and returns the checker's exit code.
inline int finish() {
  if (dist::world().rank() == 0) {
    if (detail::failures())
      std::printf("\n%d check(s) failed; the first: '%s'\n", detail::failures(), detail::first_failure().c_str());
    else
      std::printf("\nall checks passed\n");
  }
  return detail::failures() ? 1 : 0;
}

/// @brief The maximum of `v` over all ranks.
inline double global_max(double v) {
  at::Tensor t = at::full({1}, v, at::kDouble);
  dist::world().group()->all_reduce(t, dist::ReduceOp::Max);
  return t.item<double>();
}

/// @brief N(0, scale²) numbers, the same on every rank: a fixed seed per tensor.
inline at::Tensor seeded(uint64_t seed, at::IntArrayRef shape, double scale = 1.0) {
  at::manual_seed(seed);
  return at::randn(shape, at::kFloat) * scale;
}

/// @brief max |a − ref| / max(1, max |ref|); infinity when a is missing or misshapen.
inline double rel_diff(const at::Tensor& a, const at::Tensor& ref) {
  if (!a.defined() || a.sizes() != ref.sizes()) return INFINITY;
  const double scale = std::max(1.0, ref.abs().max().item<double>());
  return (a - ref).abs().max().item<double>() / scale;
}

/// @brief printf-style formatting of a few numbers into a std::string.
template <typename... Args>
std::string fmt(const char* f, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, static_cast<double>(args)...);
  return buf;
}

}  // namespace titan::lab
