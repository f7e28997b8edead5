#include "titan/util/periodic_thread.hpp"

namespace titan {

PeriodicThread::PeriodicThread(std::chrono::milliseconds interval, Tick tick)
    : interval_(interval), tick_(std::move(tick)), thread_([this] { run(); }) {}

PeriodicThread::~PeriodicThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool PeriodicThread::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

void PeriodicThread::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    const bool again = tick_(*this);
    lock.lock();
    if (!again) return;
    cv_.wait_for(lock, interval_, [this] { return stop_; });
  }
}

}  // namespace titan
