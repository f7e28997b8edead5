#include "titan/train/stop_signal.hpp"

#include <signal.h>

#include <atomic>

namespace titan::train {

namespace {

// Written by the handler, read by the loop: lock-free atomics are
// async-signal-safe where a mutex or iostream is not.
std::atomic<int> g_signal{0};
struct sigaction g_old_int, g_old_term;

void on_signal(int sig) {
  g_signal.store(sig);
  // Back to the default action: a second Ctrl-C ends the process at once,
  // for when the current step hangs.
  ::signal(sig, SIG_DFL);
}

}  // namespace

StopSignal::StopSignal() {
  g_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a read or write in progress carries on
  ::sigaction(SIGINT, &sa, &g_old_int);
  ::sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignal::~StopSignal() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
}

bool StopSignal::requested() const { return g_signal.load() != 0; }
int StopSignal::signal_number() const { return g_signal.load(); }
void StopSignal::reset() { g_signal.store(0); }

}  // namespace titan::train
