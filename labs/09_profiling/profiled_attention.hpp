#pragma once
/// @file
/// @brief Lab 09: name the parts of a computation in profiler traces, and
/// find them again in the trace file.

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace lab09 {

/// @brief softmax(q kᵀ / sqrt(d)) v for q, k, v [batch, seq, d], with the
/// score computation marked as the range "lab09::scores", the softmax as
/// "lab09::softmax" and the product with v as "lab09::weighted_sum"
/// (TITAN_PROFILE_RANGE, lib/titan/util/range.hpp).
at::Tensor profiled_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

/// @brief One complete event of a Chrome trace: name, start and duration (µs).
struct TraceEvent {
  std::string name;
  double ts = 0, dur = 0;
};

/// @brief The complete events ("ph": "X") called `name` in the Chrome /
/// Perfetto JSON trace at `path` (its "traceEvents" array), in file order.
std::vector<TraceEvent> find_events(const std::string& path, const std::string& name);

}  // namespace lab09
