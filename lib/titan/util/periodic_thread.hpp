#pragma once
/// @file
/// @brief A background thread that does one small job now and then every
/// interval until it says it is done or its owner goes (the heartbeat's
/// beat, the peer watch's look at the next rank's counter).

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace titan {

/// @brief Calls `tick(*this)` at once and then every `interval` on a thread
/// of its own, until `tick` returns false or the object is destroyed. A tick runs
/// without the object's lock, so the destructor never waits on what a tick
/// waits on (a store); it wakes the sleeping thread and joins it once the
/// tick in progress, if any, has returned.
class PeriodicThread {
 public:
  using Tick = std::function<bool(const PeriodicThread& self)>;
  PeriodicThread(std::chrono::milliseconds interval, Tick tick);
  ~PeriodicThread();
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  /// True once the destructor has begun: a tick that learns something
  /// after a slow call checks it (on the `self` it is given) before acting.
  bool stopping() const;

 private:
  void run();

  std::chrono::milliseconds interval_;
  Tick tick_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace titan
