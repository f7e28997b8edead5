#include "titan/profiling/trace_flops.hpp"

#include <vector>

#include "titan/ops/gemm/cpu_matmul.hpp"
#include "titan/profiling/trace_reader.hpp"

namespace titan::profiling {

TraceFlops count_trace_flops(const std::string& path, double from_us, double to_us) {
  const nlohmann::json trace = load_trace_json(path);
  TraceFlops c;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.value("ph", "") != "X" || !e.contains("args") || !e["args"].contains("Input Dims")) continue;
    const double ts = e.value("ts", 0.0);
    if ((from_us >= 0 && ts < from_us) || (to_us >= 0 && ts > to_us)) continue;
    const std::string name = e.value("name", "");
    const auto& dims = e["args"]["Input Dims"];
    auto dim = [&](size_t i) { return dims.at(i).get<std::vector<int64_t>>(); };
    if (name == "aten::mm" || name == ops::kOnednnMmRecord) {  // [M, K] x [K, N]; titan::mm: oneDNN's (ops/gemm)
      const auto a = dim(0), b = dim(1);
      c.matmul += 2.0 * a[0] * a[1] * b[1], ++c.matmul_ops;
    } else if (name == "aten::addmm") {  // bias, [M, K] x [K, N]
      const auto a = dim(1), b = dim(2);
      c.matmul += 2.0 * a[0] * a[1] * b[1], ++c.matmul_ops;
    } else if (name == "aten::bmm") {  // [B, M, K] x [B, K, N]
      const auto a = dim(0), b = dim(1);
      c.matmul += 2.0 * a[0] * a[1] * a[2] * b[2], ++c.matmul_ops;
    } else if (name == "aten::_scaled_dot_product_flash_attention_for_cpu") {
      const auto q = dim(0);  // [B, H, T, Q]
      c.attention += 2 * 2.0 * q[0] * q[1] * q[2] * q[2] * q[3], ++c.attention_ops;
    } else if (name == "aten::_scaled_dot_product_flash_attention_for_cpu_backward") {
      const auto q = dim(1);  // (grad_out, q, k, v, ...)
      c.attention += 2 * 2 * 2.0 * q[0] * q[1] * q[2] * q[2] * q[3], ++c.attention_ops;
    }
  }
  return c;
}

}  // namespace titan::profiling
