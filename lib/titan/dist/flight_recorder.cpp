#include "titan/dist/flight_recorder.hpp"

#include <c10/core/ScalarType.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <type_traits>

#include "titan/util/range.hpp"

namespace titan::dist {

FlightRecorder& FlightRecorder::instance() {
  // Leaked on purpose: a fatal signal or the SIGUSR1 thread may dump it
  // while static destructors run.
  static FlightRecorder* recorder = new FlightRecorder();
  return *recorder;
}

void FlightRecorder::configure(int64_t entries) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = entries > 0 ? entries : 0;
  ring_.assign(static_cast<size_t>(capacity_.load()), FlightEntry{});
  next_id_ = 0;
  probes_.clear();
  seq_.clear();
}

void FlightRecorder::set_dump_target(std::string folder, std::string prefix, int rank, int world_size) {
  std::lock_guard<std::mutex> lock(mu_);
  folder_ = std::move(folder);
  prefix_ = std::move(prefix);
  rank_ = rank;
  world_size_ = world_size;
}

void FlightRecorder::register_group(const std::string& name, const std::vector<int>& global_ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& g : groups_)
    if (g.first == name) {
      g.second = global_ranks;
      return;
    }
  groups_.emplace_back(name, global_ranks);
}

int64_t FlightRecorder::scheduled(const std::string& group, CommOp op, bool p2p, int peer, const at::Tensor& input,
                                  const at::Tensor& output) {
  if (!enabled()) return -1;
  FlightEntry e;
  e.group = group;
  e.op = op;
  e.p2p = p2p;
  e.peer = peer;
  if (input.defined()) {
    e.input_sizes = input.sizes().vec();
    e.dtype = c10::getDtypeNames(input.scalar_type()).first;
  }
  if (output.defined()) e.output_sizes = output.sizes().vec();
  e.context = RangeLabel::innermost();
  e.step = step_.load();
  e.scheduled_us = CommLog::instance().now_us();
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t cap = capacity_.load();
  if (cap == 0) return -1;
  // Sequence numbers count per group, collectives and P2P apart, as
  // torch's recorder does: every member issues a group's collectives in
  // the same order, so the same seq on two ranks is the same collective,
  // and the analysis can line the ranks' rings up by it.
  const std::string key = group + (p2p ? "/p" : "/c");
  int64_t* last = nullptr;
  for (auto& s : seq_)
    if (s.first == key) last = &s.second;
  if (!last) {
    seq_.emplace_back(key, 0);
    last = &seq_.back().second;
  }
  e.seq = ++*last;
  e.id = next_id_++;
  ring_[static_cast<size_t>(e.id % cap)] = std::move(e);
  poll_locked();
  return next_id_ - 1;
}

namespace {

// Entry `id` of a ring of `cap` slots while the ring still holds it (its
// slot has not been reused by a newer entry); null otherwise.
template <typename Ring>
auto* live_entry(Ring& ring, int64_t cap, int64_t id) {
  using Entry = std::remove_reference_t<decltype(ring[0])>;
  if (id < 0 || cap == 0) return static_cast<Entry*>(nullptr);
  Entry& e = ring[static_cast<size_t>(id % cap)];
  return e.id == id ? &e : nullptr;
}

}  // namespace

void FlightRecorder::started(int64_t id) {
  const double now = CommLog::instance().now_us();
  std::lock_guard<std::mutex> lock(mu_);
  FlightEntry* e = live_entry(ring_, capacity_.load(), id);
  if (!e || e->started) return;  // overwritten since, or waited for before
  e->started = true;
  e->started_us = now;
}

void FlightRecorder::completed(int64_t id) {
  const double now = CommLog::instance().now_us();
  std::lock_guard<std::mutex> lock(mu_);
  FlightEntry* e = live_entry(ring_, capacity_.load(), id);
  if (!e) return;  // overwritten since: the ring kept only the newest entries
  if (!e->started) e->started = true, e->started_us = now;
  e->completed = true;
  e->completed_us = now;
}

void FlightRecorder::completes_when(int64_t id, std::function<bool()> done) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!live_entry(ring_, capacity_.load(), id)) return;
  // In issue order (waits may come in another order): poll_locked relies on it.
  auto at = std::upper_bound(probes_.begin(), probes_.end(), id,
                             [](int64_t v, const auto& probe) { return v < probe.first; });
  probes_.emplace(at, id, std::move(done));
  poll_locked();
}

void FlightRecorder::poll_locked() const {
  if (probes_.empty()) return;
  const double now = CommLog::instance().now_us();
  // A group's ops run on its communicator's stream in issue order, and
  // their probes are events the compute stream passes after them: once one
  // is still pending, the later ones of that group are too, and are not
  // asked (asking each pending op at every new op would cost the square of
  // the ops the host runs ahead). An op waited out of issue order may so
  // be seen completed a little late, never early.
  std::vector<const std::string*> busy_groups;
  size_t kept = 0;
  auto keep = [&](std::pair<int64_t, std::function<bool()>>& probe) {
    if (&probes_[kept] != &probe) probes_[kept] = std::move(probe);
    ++kept;
  };
  for (auto& probe : probes_) {
    FlightEntry* e = live_entry(ring_, capacity_.load(), probe.first);
    if (!e) continue;  // the ring moved past it
    bool behind_busy = false;
    for (const std::string* g : busy_groups) behind_busy = behind_busy || *g == e->group;
    if (behind_busy) {
      keep(probe);
      continue;
    }
    bool done = false;
    try {
      done = probe.second();
    } catch (...) {
      done = false;  // a failed work never completes; its failure is reported where it is waited
    }
    if (done) {
      e->completed = true;
      e->completed_us = now;
      continue;
    }
    busy_groups.push_back(&e->group);
    keep(probe);
  }
  probes_.resize(kept);
}

bool FlightRecorder::find(int64_t id, FlightEntry& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  poll_locked();
  const FlightEntry* e = live_entry(ring_, capacity_.load(), id);
  if (!e) return false;
  out = *e;
  return true;
}

std::vector<FlightEntry> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  poll_locked();
  std::vector<FlightEntry> out;
  const int64_t cap = capacity_.load();
  for (int64_t id = std::max<int64_t>(0, next_id_ - cap); id < next_id_; ++id)
    out.push_back(ring_[static_cast<size_t>(id % cap)]);
  return out;
}

std::string FlightRecorder::to_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  poll_locked();
  return to_json_locked();
}

std::string FlightRecorder::to_json_locked() const {
  using nlohmann::json;
  json groups = json::object();
  for (const auto& g : groups_) groups[g.first] = g.second;
  json entries = json::array();
  const int64_t cap = capacity_.load();
  for (int64_t id = std::max<int64_t>(0, next_id_ - cap); id < next_id_; ++id) {
    const FlightEntry& e = ring_[static_cast<size_t>(id % cap)];
    json j = {{"id", e.id},
              {"group", e.group},
              {"seq", e.seq},
              {"p2p", e.p2p},
              {"op", comm_op_name(e.op)},
              {"input_sizes", e.input_sizes},
              {"output_sizes", e.output_sizes},
              {"dtype", e.dtype},
              {"context", e.context},
              {"step", e.step},
              {"state", e.state()},
              {"scheduled_s", e.scheduled_us / 1e6},
              {"started_s", e.started ? e.started_us / 1e6 : 0.0},
              {"completed_s", e.completed ? e.completed_us / 1e6 : 0.0}};
    if (e.p2p) j["peer"] = e.peer;
    entries.push_back(std::move(j));
  }
  json out = {{"version", 1},
              {"rank", rank_},
              {"world_size", world_size_},
              {"pid", static_cast<int64_t>(::getpid())},
              {"dumped_s", CommLog::instance().now_us() / 1e6},
              {"buffer_entries", cap},
              {"entries_issued", next_id_},
              {"groups", groups},
              {"entries", entries}};
  return out.dump(1);
}

std::string FlightRecorder::dump_to_target(bool blocking) const {
  try {
    std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
    if (blocking) lock.lock();
    else if (!lock.try_lock()) return "";
    if (capacity_.load() == 0 || folder_.empty()) return "";
    if (blocking) poll_locked();  // not in a signal handler: a probe asks the GPU
    const std::filesystem::path path = std::filesystem::path(folder_) / (prefix_ + std::to_string(rank_) + ".json");
    std::filesystem::create_directories(path.parent_path());
    const std::string text = to_json_locked();
    const std::filesystem::path tmp = path.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << text << '\n';
      if (!out) return "";
    }
    std::filesystem::rename(tmp, path);
    return path.string();
  } catch (...) {
    return "";  // never in the way of the error being reported
  }
}

// ----------------------------------------------------------------- signals

namespace {

int g_wake_pipe[2] = {-1, -1};
struct sigaction g_old_fatal[32];
constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

void on_usr1(int) {
  // Only async-signal-safe work here: wake the dumping thread.
  const char byte = 1;
  ssize_t ignored = ::write(g_wake_pipe[1], &byte, 1);
  (void)ignored;
}

void on_fatal(int sig) {
  // Best effort: the process is going down anyway. The lock is only tried,
  // so a crash inside the recorder itself cannot deadlock here.
  const std::string path = FlightRecorder::instance().dump_to_target(/*blocking=*/false);
  if (!path.empty()) {
    const std::string line = "flight recorder: " + std::string(strsignal(sig)) + ", wrote " + path + "\n";
    ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
  }
  ::sigaction(sig, &g_old_fatal[sig], nullptr);
  ::raise(sig);  // delivered once this handler returns, with the old action
}

}  // namespace

void FlightRecorder::install_signal_dumps() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pipe(g_wake_pipe) != 0) return;
    ::fcntl(g_wake_pipe[0], F_SETFD, FD_CLOEXEC);
    ::fcntl(g_wake_pipe[1], F_SETFD, FD_CLOEXEC);
    std::thread([] {
      char byte;
      while (true) {
        const ssize_t n = ::read(g_wake_pipe[0], &byte, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        const std::string path = FlightRecorder::instance().dump_to_target();
        std::fprintf(stderr, "flight recorder: SIGUSR1, wrote %s\n", path.empty() ? "nothing (off)" : path.c_str());
      }
    }).detach();
    struct sigaction sa {};
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &sa, nullptr);
    struct sigaction fatal {};
    fatal.sa_handler = on_fatal;
    sigemptyset(&fatal.sa_mask);
    for (int sig : kFatalSignals) ::sigaction(sig, &fatal, &g_old_fatal[sig]);
  });
}

}  // namespace titan::dist
