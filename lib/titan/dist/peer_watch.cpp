#include "titan/dist/peer_watch.hpp"

#include <algorithm>
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

PeerWatch::PeerWatch(const Heartbeat& heartbeat, int rank, int world_size, std::chrono::milliseconds window)
    : heartbeat_(heartbeat), peer_((rank + 1) % world_size), window_(window) {
  others_.push_back(peer_);
  for (int r = 0; r < world_size; ++r)
    if (r != rank && r != peer_) others_.push_back(r);
  looking_ = std::make_unique<PeriodicThread>(heartbeat_.interval(), [this](const PeriodicThread& self) { return look(self); });
}

PeerWatch::~PeerWatch() = default;  // looking_ goes first

bool PeerWatch::look(const PeriodicThread& thread) {
  const HeartbeatReading reading = heartbeat_.read({peer_});
  const auto now = Clock::now();
  if (thread.stopping()) return false;  // the job is leaving: nothing to judge
  const auto seconds = [](Clock::duration d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count());
  };
  if (!reading.store_reachable) {
    if (now - store_answered_ < window_) return true;
    gone("the job's rendezvous store stopped answering " + seconds(now - store_answered_) +
         " s ago (its host is gone: rank 0 under titan run and Slurm, torchrun's agent otherwise)");
  }
  store_answered_ = now;
  const int64_t count = reading.counts.at(peer_);
  if (count != last_count_) {
    last_count_ = count;
    last_change_ = now;
    return true;
  }
  if (now - last_change_ < window_) return true;
  const std::string still = "its heartbeat stood still for " + seconds(now - last_change_) + " s";
  // A rank that failed on its own said why before it went quiet (its exit
  // may hang in a teardown): that says more than "gone". One read of the
  // board, once, at the end.
  const std::string words = heartbeat_.failure_reports(others_);
  if (!words.empty())
    gone("rank " + std::to_string(peer_) + " went quiet (" + still + ") after " + words + "; this rank watched it");
  gone("rank " + std::to_string(peer_) + " is gone (" + still + ": killed, stopped or lost with its host); this rank watched it");
}

void PeerWatch::gone(const std::string& message) {
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
