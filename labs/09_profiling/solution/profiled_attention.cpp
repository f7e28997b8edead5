// Lab 09 — the reference solution.
#include "profiled_attention.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "titan/util/range.hpp"

namespace lab09 {

at::Tensor profiled_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  at::Tensor scores, probs;
  {
    TITAN_PROFILE_RANGE("lab09::scores");
    scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  }
  {
    TITAN_PROFILE_RANGE("lab09::softmax");
    probs = at::softmax(scores, -1);
  }
  TITAN_PROFILE_RANGE("lab09::weighted_sum");
  return at::matmul(probs, v);
}

std::vector<TraceEvent> find_events(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::vector<TraceEvent> out;
  for (const auto& e : trace.at("traceEvents"))
    if (e.value("ph", "") == "X" && e.value("name", "") == name)
      out.push_back({name, e.value("ts", 0.0), e.value("dur", 0.0)});
  return out;
}

}  // namespace lab09
