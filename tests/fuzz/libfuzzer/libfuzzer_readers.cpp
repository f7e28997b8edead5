// The readers of outside input under libFuzzer: coverage-guided mutation
// (clang's -fsanitize=fuzzer) with AddressSanitizer and
// UndefinedBehaviorSanitizer, over the same targets and the same rule as
// the seeded fuzzer (../reader_targets.hpp): accept an input, or refuse it
// with a titan::Error of one line naming the file. Any other outcome
// aborts, and libFuzzer saves the input (crash-<sha1>) and exits non-zero;
// crashes, sanitizer reports and hangs (-timeout) are libFuzzer's own.
//
// One program serves every reader; the flags that start with "--" are the
// program's (libFuzzer ignores them), the ones with one "-" libFuzzer's:
//   libfuzzer_readers --list
//   libfuzzer_readers --target=NAME --write-corpus=DIR   the seeds, and DIR.dict
//   libfuzzer_readers --target=NAME [libFuzzer flags] DIR
// run.sh runs every reader this way and prints a table.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

#include "../reader_targets.hpp"
#include "titan/util/files.hpp"

namespace {

std::vector<titan_fuzz::Target> g_targets;  // destroyed after the atexit handler below runs
const titan_fuzz::Target* g_target = nullptr;
std::string g_scratch;
/// What the inputs did, printed at exit for run.sh's table.
long long g_inputs = 0, g_accepted = 0, g_refused = 0, g_located = 0;

/// A libFuzzer dictionary entry: the token quoted, with \\, \" and
/// anything unprintable as \xNN.
std::string dictionary_entry(const std::string& token) {
  std::string out = "\"";
  for (unsigned char c : token) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr, "libfuzzer_readers: %s\n", why.c_str());
  std::exit(2);
}

}  // namespace

/// AddressSanitizer's defaults for this program: the readers are defined
/// twice on purpose (here, instrumented, and in libtitan.so), and
/// LibTorch's static allocations are not the readers' leaks.
extern "C" const char* __asan_default_options() { return "detect_odr_violation=0:detect_leaks=0"; }

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  std::string target_name, corpus_dir;
  bool list = false;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = (*argv)[i];
    if (a == "--list") list = true;
    else if (a.rfind("--target=", 0) == 0) target_name = a.substr(9);
    else if (a.rfind("--write-corpus=", 0) == 0) corpus_dir = a.substr(15);
    else if (a.rfind("--", 0) == 0) usage_error("unknown option " + a);
  }
  const char* src = std::getenv("TITAN_SOURCE_DIR");
  g_scratch = titan::files::temp_dir() + "/titan-libfuzzer-" + std::to_string(::getpid());
  titan::files::make_directories(g_scratch);
  std::atexit([] {
    titan::files::remove_all(g_scratch);
    if (g_target && g_inputs > 0)
      std::fprintf(stderr, "libfuzzer_readers: target %s: %lld inputs, %lld accepted, %lld refused, %lld located\n",
                   g_target->name.c_str(), g_inputs, g_accepted, g_refused, g_located);
  });
  g_targets = titan_fuzz::make_targets(g_scratch, src && *src ? src : ".");
  if (list) {
    for (const auto& t : g_targets) std::printf("%s\n", t.name.c_str());
    std::exit(0);
  }
  for (const auto& t : g_targets)
    if (t.name == target_name) g_target = &t;
  if (!g_target) usage_error(target_name.empty() ? "--target=NAME is required (--list names them)"
                                                 : "no target " + target_name + " (--list names them)");
  if (!corpus_dir.empty()) {
    titan::files::make_directories(corpus_dir);
    for (size_t k = 0; k < g_target->seeds.size(); ++k)
      titan_fuzz::write_bytes(corpus_dir + "/seed-" + std::to_string(k), g_target->seeds[k]);
    std::string dict;
    for (const auto& token : g_target->tokens) dict += dictionary_entry(token) + "\n";
    titan_fuzz::write_bytes(corpus_dir + ".dict", dict);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const titan_fuzz::Outcome out = titan_fuzz::run_input(*g_target, input, /*is_seed=*/false);
  ++g_inputs;
  g_accepted += out.accepted;
  g_refused += out.refused;
  g_located += out.located;
  if (!out.finding.empty()) {
    std::fprintf(stderr, "libfuzzer_readers: target %s: %s\n", g_target->name.c_str(), out.finding.substr(0, 400).c_str());
    std::abort();
  }
  return 0;
}
