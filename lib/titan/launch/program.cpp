#include "titan/launch/program.hpp"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "titan/dist/launch_env.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/local_launcher.hpp"
#include "titan/util/error.hpp"

namespace titan {
namespace {

// Removes "--name V" or "--name=V" from argv; returns V when present.
std::optional<std::string> take_flag(int& argc, char** argv, const char* name) {
  const size_t len = std::strlen(name);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;
    std::optional<std::string> value;
    int used = 0;
    if (std::strcmp(argv[i], name) == 0) {
      TITAN_CHECK(i + 1 < argc, name, " needs a value");
      value = argv[i + 1];
      used = 2;
    } else if (std::strncmp(argv[i], name, len) == 0 && argv[i][len] == '=') {
      value = std::string(argv[i] + len + 1);
      used = 1;
    }
    if (used) {
      for (int j = i; j + used <= argc; ++j) argv[j] = argv[j + used];
      argc -= used;
      return value;
    }
  }
  return std::nullopt;
}

int to_positive(const std::string& s, const char* flag) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  TITAN_CHECK(end != s.c_str() && *end == '\0' && v >= 1 && v <= 4096, flag, " must be a positive integer (got '", s, "')");
  return static_cast<int>(v);
}

std::string self_path(const char* argv0) {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) return std::string(buf, static_cast<size_t>(n));
  return argv0;
}

}  // namespace

std::string error_message(const std::exception& e) {
  std::string what;
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e))
    what = c10e->what_without_backtrace();
  else
    what = e.what();
  return what.substr(0, what.find('\n'));
}

std::optional<int> maybe_self_launch(int& argc, char** argv,
                                     const std::function<void(int, char**, int)>& before_launch) {
  auto nproc = take_flag(argc, argv, "--nproc");
  auto port = take_flag(argc, argv, "--master-port");
  if (!nproc) return std::nullopt;
  int n = to_positive(*nproc, "--nproc");
  const char* world = std::getenv("WORLD_SIZE");
  if (std::getenv("RANK") && world) {
    TITAN_CHECK(std::atoi(world) == n, "--nproc ", n, " but the launcher started WORLD_SIZE=", world);
    return std::nullopt;
  }
  if (before_launch) before_launch(argc, argv, n);
  launch::LaunchOptions opts;
  opts.nproc = n;
  opts.master_port = port ? to_positive(*port, "--master-port") : 0;
  opts.command.push_back(self_path(argv[0]));
  for (int i = 1; i < argc; ++i) opts.command.emplace_back(argv[i]);
  return launch::launch_local(opts);
}

int run_main(int argc, char** argv, const std::function<int(int, char**)>& body,
             const std::function<void(int, char**, int)>& before_launch) {
  // A write to a socket that a dead peer closed (Gloo's pairs, the
  // rendezvous store) then fails with EPIPE, which the collective turns into
  // an error naming the peer; at its default SIGPIPE would kill this rank
  // with no word (a CI run lost Faults.ARankThatExitsMidRunIsNamed so: rank
  // 0 ended on "Broken pipe"). Python, and so torchrun's ranks, ignore it
  // from start-up.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    if (auto code = maybe_self_launch(argc, argv, before_launch)) return *code;
    int rc = body(argc, argv);
    dist::shutdown();
    return rc;
  } catch (const std::exception& e) {
    std::string msg = error_message(e);
    std::fflush(stdout);
    std::fprintf(stderr, "%serror: %s\n", dist::error_line_prefix().c_str(), msg.c_str());
    std::fflush(stderr);
    dist::report_failure(msg, dynamic_cast<const dist::CommError*>(&e) != nullptr);
    // Leave at once: destructors of process groups could wait on a
    // collective that will never finish.
    std::_Exit(1);
  }
}

}  // namespace titan
