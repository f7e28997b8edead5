#pragma once
/// @file
/// @brief ByteGauge: a named, process-wide count of bytes with its peak, so
/// that a lower layer can read what a higher one publishes without
/// including it (profiling's memory snapshot reads the bytes FSDP keeps
/// unsharded; FSDP lives above profiling).

#include <atomic>
#include <cstdint>
#include <string>

namespace titan {

/// @brief A count of bytes alive and the largest it has been since the last
/// reset_peak(). Thread-safe (atomics).
class ByteGauge {
 public:
  /// @brief Adds `bytes` (negative to release) and raises the peak if needed.
  void add(int64_t bytes) {
    const int64_t now = now_ += bytes;
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
  }
  /// @brief The bytes counted now.
  int64_t now() const { return now_.load(); }
  /// @brief The largest now() since reset_peak().
  int64_t peak() const { return peak_.load(); }
  /// @brief Starts a new peak window at the current value.
  void reset_peak() { peak_ = now_.load(); }

 private:
  std::atomic<int64_t> now_{0};
  std::atomic<int64_t> peak_{0};
};

/// @brief The process's gauge called `name`, created (at zero) on first use;
/// the same object for the life of the process.
ByteGauge& byte_gauge(const std::string& name);

/// @brief Bytes of full (unsharded) parameters that FSDP holds now.
inline constexpr const char* kFsdpUnshardedGauge = "fsdp.unsharded_params";

}  // namespace titan
