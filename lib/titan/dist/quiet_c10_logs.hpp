#pragma once
/// @file
/// @brief QuietC10Logs: silences c10's logging for a scope.

#include <c10/util/Logging.h>

#include <mutex>

namespace titan::dist {

/// @brief c10d logs every failed store call with a backtrace; while titan
/// probes a store that may be gone (failure reports, flight words,
/// heartbeats), those lines are noise around its own one-line error.
/// Scopes may overlap across threads (the heartbeat beats on its own): the
/// first to enter saves the level, the last to leave restores it.
class QuietC10Logs {
 public:
  QuietC10Logs() {
    std::lock_guard<std::mutex> lock(mutex());
    if (depth()++ == 0) {
      saved() = FLAGS_caffe2_log_level;
      FLAGS_caffe2_log_level = 3;
    }
  }
  ~QuietC10Logs() {
    std::lock_guard<std::mutex> lock(mutex());
    if (--depth() == 0) FLAGS_caffe2_log_level = saved();
  }
  QuietC10Logs(const QuietC10Logs&) = delete;
  QuietC10Logs& operator=(const QuietC10Logs&) = delete;

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static int& depth() {
    static int d = 0;
    return d;
  }
  static int& saved() {
    static int s = 0;
    return s;
  }
};

}  // namespace titan::dist
