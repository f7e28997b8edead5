#include "titan/launch/local_launcher.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "titan/util/error.hpp"

namespace titan::launch {
namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1;     // child's stdout and stderr, merged
  std::string partial; // bytes after the last newline
  bool running = true;
  int status = 0;
};

void relay(Child& c, const char* data, size_t n, bool prefix) {
  c.partial.append(data, n);
  size_t start = 0, nl;
  std::string out;
  while ((nl = c.partial.find('\n', start)) != std::string::npos) {
    if (prefix) out += "[rank " + std::to_string(c.rank) + "] ";
    out.append(c.partial, start, nl - start + 1);
    start = nl + 1;
  }
  c.partial.erase(0, start);
  if (!out.empty()) {
    fwrite(out.data(), 1, out.size(), stdout);
    fflush(stdout);
  }
}

void flush_partial(Child& c, bool prefix) {
  if (c.partial.empty()) return;
  std::string out = (prefix ? "[rank " + std::to_string(c.rank) + "] " : std::string()) + c.partial + "\n";
  fwrite(out.data(), 1, out.size(), stdout);
  fflush(stdout);
  c.partial.clear();
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "unknown status";
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

namespace {

// Whether `port` (0: any) on 127.0.0.1 can be bound now; the bound port.
int try_bind(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  return ok ? ntohs(addr.sin_port) : -1;
}

}  // namespace

int pick_free_port() {
  // The kernel hands out its ephemeral ports (ip_local_port_range, 32768-
  // 60999 by default) to every socket bound to port 0 and to every outgoing
  // connection, Gloo's pairs among them: a port picked there can be taken
  // by another job's connection in the seconds before rank 0 binds it for
  // the store ("port ... is already in use"). A port below that range is
  // taken only by an explicit bind, so the store's port is drawn there.
  int lo = 32768, hi = 60999;
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d %d", &lo, &hi) != 2) lo = 32768, hi = 60999;
    std::fclose(f);
  }
  const bool below = lo - 1024 >= 4096;  // room under the range; else above it
  const int first = below ? std::max(1024, lo - 16384) : hi + 1, last = below ? lo - 1 : 65535;
  if (last - first >= 64) {
    std::mt19937 pick(std::random_device{}());
    std::uniform_int_distribution<int> in_window(first, last);
    for (int attempt = 0; attempt < 64; ++attempt) {
      const int port = try_bind(in_window(pick));
      if (port > 0) return port;
    }
  }
  const int port = try_bind(0);
  TITAN_CHECK(port > 0, "titan run: cannot find a free port on 127.0.0.1");
  return port;
}

int launch_local(const LaunchOptions& options) {
  TITAN_CHECK(options.nproc >= 1, "titan run: --nproc must be at least 1 (got ", options.nproc, ")");
  TITAN_CHECK(!options.command.empty(), "titan run: no program given (usage: titan run --nproc N -- PROGRAM ARGS...)");
  const int port = options.master_port > 0 ? options.master_port : pick_free_port();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = std::max(1, static_cast<int>(cores) / options.nproc);

  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int{}, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  g_signal = 0;

  std::vector<Child> children(options.nproc);
  for (int r = 0; r < options.nproc; ++r) {
    int fds[2];
    TITAN_CHECK(pipe(fds) == 0, "titan run: pipe() failed: ", strerror(errno));
    pid_t pid = fork();
    TITAN_CHECK(pid >= 0, "titan run: fork() failed: ", strerror(errno));
    if (pid == 0) {
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(options.nproc).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(options.nproc).c_str(), 1);
      setenv("GROUP_RANK", "0", 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("TITAN_LAUNCHER", "1", 1);
      setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 0);
      std::vector<char*> argv;
      for (const auto& a : options.command) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      fprintf(stderr, "titan run: cannot execute '%s': %s\n", argv[0], strerror(errno));
      _exit(127);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    children[r].rank = r;
    children[r].pid = pid;
    children[r].out_fd = fds[0];
  }

  int failed_rank = -1;
  int failed_status = 0;
  bool stopping = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  // After the first failure the others get a moment before SIGTERM: a
  // rank that fails too writes its own error, naming its peers through the
  // store that rank 0 hosts (the failure board's 2 s wait, the flight
  // recorder's words), and that store must not be stopped under it.
  constexpr auto kReportMoment = std::chrono::milliseconds(3000);
  auto first_failure_at = std::chrono::steady_clock::time_point::max();
  auto signal_all = [&](int sig) {
    for (auto& c : children)
      if (c.running) kill(c.pid, sig);
  };

  while (true) {
    // Relay output.
    std::vector<pollfd> fds;
    std::vector<Child*> owners;
    for (auto& c : children)
      if (c.out_fd >= 0) {
        fds.push_back({c.out_fd, POLLIN, 0});
        owners.push_back(&c);
      }
    if (!fds.empty()) poll(fds.data(), fds.size(), 50);
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        relay(*owners[i], buf, static_cast<size_t>(n), options.prefix_output);
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        flush_partial(*owners[i], options.prefix_output);
        close(owners[i]->out_fd);
        owners[i]->out_fd = -1;
      }
    }
    // Reap.
    for (auto& c : children) {
      if (!c.running) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.running = false;
        c.status = status;
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed_rank < 0 && !stopping) {
          failed_rank = c.rank;
          failed_status = status;
        }
      }
    }
    if (g_signal && !stopping) {
      fprintf(stderr, "titan run: received %s, stopping all ranks\n", strsignal(g_signal));
      signal_all(SIGTERM);
      stopping = true;
      stop_deadline = std::chrono::steady_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(options.grace_seconds * 1000));
    }
    if (failed_rank >= 0 && first_failure_at == std::chrono::steady_clock::time_point::max())
      first_failure_at = std::chrono::steady_clock::now();
    if (failed_rank >= 0 && !stopping && options.stop_on_failure &&
        std::chrono::steady_clock::now() >= first_failure_at + kReportMoment) {
      signal_all(SIGTERM);
      stopping = true;
      stop_deadline = std::chrono::steady_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(options.grace_seconds * 1000));
    }
    if (stopping && std::chrono::steady_clock::now() > stop_deadline) {
      signal_all(SIGKILL);
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }
    bool any_running = std::any_of(children.begin(), children.end(), [](const Child& c) { return c.running; });
    bool any_open = std::any_of(children.begin(), children.end(), [](const Child& c) { return c.out_fd >= 0; });
    if (!any_running && !any_open) break;
    if (!any_running && any_open && stopping) {
      // Grandchildren may hold the pipes open; do not wait for them.
      for (auto& c : children)
        if (c.out_fd >= 0) {
          flush_partial(c, options.prefix_output);
          close(c.out_fd);
          c.out_fd = -1;
        }
      break;
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);

  if (failed_rank >= 0) {
    std::string stopped;
    for (auto& c : children)
      if (c.rank != failed_rank && !(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0))
        stopped += (stopped.empty() ? "" : ", ") + std::to_string(c.rank) + " (" + describe_status(c.status) + ")";
    // 130 / 143 is how a program says it stopped cleanly on Ctrl-C / SIGTERM
    // (`titan train` after finishing its step): a stop, not a failure.
    const bool on_signal = WIFEXITED(failed_status) && (WEXITSTATUS(failed_status) == 128 + SIGINT ||
                                                        WEXITSTATUS(failed_status) == 128 + SIGTERM);
    fprintf(stderr, "titan run: rank %d %s %s; %s\n", failed_rank, on_signal ? "stopped on a signal, with" : "failed with",
            describe_status(failed_status).c_str(),
            stopped.empty() ? "the other ranks had finished" : ("also ended: ranks " + stopped).c_str());
    int code = exit_code_of(failed_status);
    return code == 0 ? 1 : code;
  }
  if (g_signal) return 128 + g_signal;
  return 0;
}

}  // namespace titan::launch
