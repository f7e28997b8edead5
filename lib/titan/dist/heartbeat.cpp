#include "titan/dist/heartbeat.hpp"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <thread>
#include <string>

#include "titan/dist/process_group.hpp"
#include "titan/dist/quiet_c10_logs.hpp"

namespace titan::dist {
namespace {

std::atomic<const Heartbeat*> g_current{nullptr};

std::string key_of(int rank) { return "titan/heartbeat/" + std::to_string(rank); }

}  // namespace

Heartbeat::Heartbeat(const c10::intrusive_ptr<c10d::Store>& store, int rank, std::chrono::milliseconds interval)
    : rank_(rank), interval_(interval) {
  {
    QuietC10Logs quiet;
    store_ = store->clone();
    // Short: a reader waiting on a store that has died must not stall the
    // failure path it serves.
    store_->setTimeout(std::chrono::seconds(5));
  }
  beating_ = std::make_unique<PeriodicThread>(interval_, [this](const PeriodicThread&) {
    beat();
    return true;
  });
}

Heartbeat::~Heartbeat() = default;  // beating_ goes first: the beat stops before the store

void Heartbeat::beat() {
  std::lock_guard<std::mutex> store_lock(store_mu_);
  QuietC10Logs quiet;
  try {
    store_->set(key_of(rank_), std::to_string(++count_));
  } catch (...) {
    // The store is gone (its host died, or the job is ending): nothing to
    // beat into; the failure path says what it knows.
  }
}

HeartbeatReading Heartbeat::read(const std::vector<int>& ranks) const {
  HeartbeatReading reading;
  std::lock_guard<std::mutex> lock(store_mu_);
  QuietC10Logs quiet;
  try {
    for (int r : ranks) {
      int64_t count = -1;
      if (store_->check({key_of(r)})) {
        const std::vector<uint8_t> bytes = store_->get(key_of(r));
        count = std::stoll(std::string(bytes.begin(), bytes.end()));
      }
      reading.counts[r] = count;
    }
  } catch (...) {
    reading.store_reachable = false;
  }
  reading.at = std::chrono::steady_clock::now();
  return reading;
}

void Heartbeat::report_knock_on_failure(const std::string& message) const {
  std::lock_guard<std::mutex> lock(store_mu_);
  QuietC10Logs quiet;
  FailureBoard::report(store_, rank_, message, /*knock_on=*/true);  // never throws
}

std::string Heartbeat::failure_reports(const std::vector<int>& ranks) const {
  std::lock_guard<std::mutex> lock(store_mu_);
  QuietC10Logs quiet;
  return FailureBoard::describe(store_, ranks, std::chrono::milliseconds(0));
}

std::optional<std::vector<int>> Heartbeat::silent_since(const HeartbeatReading& before,
                                                        std::chrono::milliseconds window) const {
  if (!before.store_reachable) return std::nullopt;
  const auto ready = before.at + window;
  if (std::chrono::steady_clock::now() < ready) std::this_thread::sleep_until(ready);
  std::vector<int> ranks;
  for (const auto& [r, count] : before.counts) ranks.push_back(r);
  const HeartbeatReading after = read(ranks);
  if (!after.store_reachable) return std::nullopt;
  std::vector<int> silent;
  for (const auto& [r, count] : before.counts)
    if (after.counts.at(r) == count) silent.push_back(r);
  return silent;
}

const Heartbeat* current_heartbeat() { return g_current.load(); }

namespace detail {
void set_current_heartbeat(const Heartbeat* heartbeat) { g_current.store(heartbeat); }
}  // namespace detail

}  // namespace titan::dist
