// Lab 09 — YOUR code: fill the TODO(lab) holes (see ../README.md).
#include "profiled_attention.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "titan/util/range.hpp"

namespace lab09 {

at::Tensor profiled_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  at::Tensor scores, probs;
  // TODO(lab): mark this block as the range "lab09::scores": a
  //            TITAN_PROFILE_RANGE("...") at the top of a { } scope.
  scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  // TODO(lab): the softmax as "lab09::softmax".
  probs = at::softmax(scores, -1);
  // TODO(lab): the product with v as "lab09::weighted_sum".
  return at::matmul(probs, v);
}

std::vector<TraceEvent> find_events(const std::string& path, const std::string& name) {
  std::vector<TraceEvent> out;
  // TODO(lab): parse the file with nlohmann::json, walk its "traceEvents"
  //            array and keep the events whose "ph" is "X" and whose "name"
  //            is `name`, with their "ts" and "dur".
  (void)path, (void)name;
  return out;
}

}  // namespace lab09
