#include "titan/dist/peer_watch.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "titan/dist/flight_recorder.hpp"
#include "titan/dist/heartbeat.hpp"
#include "titan/dist/launch_env.hpp"

namespace titan::dist {

bool peer_watch_wanted(bool device_is_cuda) {
  const char* v = std::getenv("TITAN_PEER_WATCH");
  if (v && *v) return std::strcmp(v, "0") != 0;
  return device_is_cuda;
}

std::chrono::milliseconds peer_watch_window(std::chrono::milliseconds collective_timeout,
                                            std::chrono::milliseconds heartbeat_interval) {
  const auto half = collective_timeout / 2;
  const auto floor = heartbeat_interval * 3;  // a slow beat is not a stopped one
  const std::chrono::milliseconds ceiling = std::chrono::seconds(60);
  return std::max(floor, std::min(half, ceiling));
}

PeerWatch::PeerWatch(const Heartbeat& heartbeat, int rank, int world_size, std::chrono::milliseconds window,
                     OnGone on_gone)
    : heartbeat_(heartbeat),
      rank_(rank),
      peer_((rank + 1) % world_size),
      window_(window),
      on_gone_(std::move(on_gone)) {
  thread_ = std::thread([this] { run(); });
}

PeerWatch::~PeerWatch() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PeerWatch::run() {
  using clock = std::chrono::steady_clock;
  int64_t last_count = -2;  // no reading yet
  auto last_change = clock::now();
  auto store_answered = clock::now();
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, heartbeat_.interval(), [this] { return stop_; })) {
    lock.unlock();  // the destructor must not wait on the store
    const HeartbeatReading reading = heartbeat_.read({peer_});
    const auto now = clock::now();
    const auto seconds = [](clock::duration d) {
      return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count());
    };
    lock.lock();
    if (stop_) return;
    if (!reading.store_reachable) {
      if (now - store_answered < window_) continue;
      lock.unlock();
      gone("the job's rendezvous store stopped answering " + seconds(now - store_answered) +
           " s ago (its host is gone: rank 0 under titan run and Slurm, torchrun's agent otherwise)");
      return;
    }
    store_answered = now;
    const int64_t count = reading.counts.at(peer_);
    if (count != last_count) {
      last_count = count;
      last_change = now;
      continue;
    }
    if (now - last_change < window_) continue;
    lock.unlock();
    gone("rank " + std::to_string(peer_) + " is gone (its heartbeat stood still for " + seconds(now - last_change) +
         " s: killed, stopped or lost with its host); this rank watched it");
    return;
  }
}

void PeerWatch::gone(const std::string& message) {
  if (on_gone_) {
    on_gone_(message);
    return;
  }
  // The main thread may be blocked anywhere (a device synchronisation, a
  // collective): this thread speaks for the rank and ends it.
  const std::string trace = FlightRecorder::instance().dump_to_target();
  std::fflush(stdout);
  std::fprintf(stderr, "%serror: %s%s\n", error_line_prefix().c_str(), message.c_str(),
               trace.empty() ? "" : (" (this rank's trace: " + trace + ")").c_str());
  std::fflush(stderr);
  heartbeat_.report_knock_on_failure(message);
  std::_Exit(1);
}

}  // namespace titan::dist
