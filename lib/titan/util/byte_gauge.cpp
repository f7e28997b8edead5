#include "titan/util/byte_gauge.hpp"

#include <map>
#include <memory>
#include <mutex>

namespace titan {

ByteGauge& byte_gauge(const std::string& name) {
  // Gauges are never removed, so a reference stays valid after the lock.
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<ByteGauge>> gauges;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<ByteGauge>& g = gauges[name];
  if (!g) g = std::make_unique<ByteGauge>();
  return *g;
}

}  // namespace titan
