#include "titan/metrics/format.hpp"

#include "titan/util/strprintf.hpp"

#include <cmath>
#include <vector>

namespace titan::metrics {

std::string with_thousands(double value) {
  if (!std::isfinite(value)) return strprintf("%f", value);
  const long long v = std::llround(value);
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  const int n = static_cast<int>(digits.size());
  for (int i = 0; i < n; ++i) {
    out += digits[i];
    if ((n - 1 - i) % 3 == 0 && i != n - 1) out += ',';
  }
  return v < 0 ? "-" + out : out;
}

std::string gib(int64_t bytes) {
  return strprintf("%.2fGiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) b /= 1024.0, ++u;
  return strprintf(u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
}

std::string duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  const long long s = std::llround(seconds);
  const long long h = s / 3600, m = (s % 3600) / 60, sec = s % 60;
  if (h > 0) return strprintf("%lld:%02lld:%02lld", h, m, sec);
  if (m > 0) return strprintf("%lld:%02lld", m, sec);
  return strprintf("%llds", sec);
}

}  // namespace titan::metrics
