// A seeded mutation fuzzer for every reader of outside input: job TOML and
// command-line overrides, tiktoken files, tokenizer.json and
// tokenizer_config.json, datasets (.jsonl, .json, .txt, .gz), safetensors
// files, a checkpoint's metadata.json and Hugging Face config.json (the
// targets and their rule: reader_targets.hpp). It needs no particular
// compiler; libfuzzer/ is the coverage-guided twin where clang has libFuzzer.
//
// Each target starts from a small corpus of valid inputs this program
// writes, and feeds the reader mutants of them (bit flips, bytes set to
// edge values, inserted JSON/TOML tokens, cut, repeated or deleted ranges,
// truncation), 1 to 4 mutations each; mutants a reader accepts join the
// corpus. A reader may accept an input or refuse it with a titan::Error;
// anything else is a finding:
//   - another exception type escaping (std::out_of_range, a JSON library
//     error, std::bad_alloc: the user would see an internal message);
//   - an error message of more than one line, or one that does not name
//     the file it is about (or, for overrides, the option);
//   - a crash or a hang: a fatal signal or an input running past its time
//     limit prints the target and input number and ends the program.
// The findings' inputs are saved beside the scratch folder.
//
// Also counted, not required: refusals that say where in the file
// ("located": a line, column or byte offset, or the key, entry or token
// the refusal is about).
//
//   fuzz_readers [--inputs N] [--seed S] [--only TARGET] [--time-limit SECONDS] [--show-unlocated]
// Prints one line per target: inputs, accepted, refused, located,
// findings; exits 1 on any finding.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "reader_targets.hpp"
#include "titan/util/files.hpp"

namespace {

using titan_fuzz::Outcome;
using titan_fuzz::run_input;
using titan_fuzz::Target;
using titan_fuzz::write_bytes;

// ------------------------------------------------------------ crash report
// What runs now, for the fatal-signal and time-limit handlers (plain
// buffers: they are read from a signal handler).
char g_current[256] = "starting";

void write_current(const char* why) {
  const char* parts[] = {"fuzz_readers: ", why, " while running ", g_current, "\n"};
  for (const char* p : parts) (void)!::write(2, p, std::strlen(p));
}

void on_fatal(int sig) {
  write_current(sig == SIGALRM ? "time limit exceeded (a hang)" : "fatal signal (a crash)");
  std::signal(sig, SIG_DFL);
  if (sig == SIGALRM) ::_exit(3);
  std::raise(sig);
}

// ------------------------------------------------------------ mutations
struct Mutator {
  std::mt19937_64 rng;
  std::vector<std::string> tokens;  ///< the format's own words and edge values

  size_t pick(size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng); }

  std::string operator()(std::string s) {
    const int rounds = 1 + static_cast<int>(pick(4));
    for (int i = 0; i < rounds; ++i) {
      const size_t at = pick(s.size() + 1);
      switch (pick(8)) {
        case 0:  // flip a bit
          if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << pick(8));
          break;
        case 1: {  // an edge byte
          static const unsigned char edges[] = {0, 1, 0x7f, 0x80, 0xff, '"', '\\', '\n', '[', '{', '-', '9'};
          if (!s.empty()) s[pick(s.size())] = static_cast<char>(edges[pick(sizeof edges)]);
          break;
        }
        case 2:  // insert a token of the format
          s.insert(at, tokens[pick(tokens.size())]);
          break;
        case 3:  // delete a range
          if (!s.empty()) s.erase(at > 0 ? at - 1 : 0, 1 + pick(16));
          break;
        case 4: {  // repeat a range
          if (s.empty()) break;
          const size_t from = pick(s.size()), len = 1 + pick(std::min<size_t>(64, s.size() - from));
          s.insert(at, s.substr(from, len));
          break;
        }
        case 5:  // truncate
          s.resize(pick(s.size() + 1));
          break;
        case 6: {  // replace a number with an edge value
          const size_t d = s.find_first_of("0123456789", pick(s.size() + 1));
          if (d == std::string::npos) break;
          size_t e = d;
          while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
          static const char* numbers[] = {"0", "-1", "99999999999999999999", "4294967296", "1e308", "-0", "2147483648"};
          s.replace(d, e - d, numbers[pick(7)]);
          break;
        }
        default:  // swap two bytes
          if (s.size() > 1) std::swap(s[pick(s.size())], s[pick(s.size())]);
      }
    }
    return s;
  }
};

// ------------------------------------------------------------ the loop
struct Tally {
  int64_t inputs = 0, accepted = 0, refused = 0, findings = 0;
  /// Refusals whose message also says where in the file: a line, column
  /// or byte offset, or the key, entry or token it is about (not
  /// required: reported).
  int64_t located = 0;
  std::vector<std::string> unlocated;  ///< a few refusals that do not
  double seconds = 0;
  std::vector<std::string> examples;
};

Tally fuzz(Target& target, int64_t inputs, uint64_t seed, unsigned time_limit_s, const std::string& findings_dir) {
  Tally tally;
  Mutator mutate{std::mt19937_64(seed), target.tokens};
  mutate.tokens.push_back("");
  std::vector<std::string> corpus = target.seeds;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < inputs; ++i) {
    // The seeds themselves first: they must be accepted.
    const bool is_seed = i < static_cast<int64_t>(target.seeds.size());
    const std::string input = is_seed ? target.seeds[i] : mutate(corpus[mutate.pick(corpus.size())]);
    std::snprintf(g_current, sizeof g_current, "target %s, input %lld (seed %llu)", target.name.c_str(),
                  static_cast<long long>(i), static_cast<unsigned long long>(seed));
    ::alarm(time_limit_s);
    const Outcome out = run_input(target, input, is_seed);
    ::alarm(0);
    if (out.accepted) {
      ++tally.accepted;
      if (corpus.size() < 256 && !is_seed) corpus.push_back(input);
    } else if (out.refused) {
      ++tally.refused;
      if (out.located) ++tally.located;
      else if (tally.unlocated.size() < 3) tally.unlocated.push_back(out.message.substr(0, 200));
    }
    ++tally.inputs;
    if (!out.finding.empty()) {
      ++tally.findings;
      const std::string saved = findings_dir + "/" + target.name + "-" + std::to_string(i);
      write_bytes(saved, input);
      if (tally.examples.size() < 5) tally.examples.push_back(out.finding.substr(0, 300) + " [input: " + saved + "]");
    }
  }
  tally.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return tally;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t inputs = 2000;
  uint64_t seed = 1;
  unsigned time_limit_s = 20;
  std::string only;
  bool show_unlocated = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "fuzz_readers: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--inputs") inputs = std::stoll(value());
    else if (a == "--seed") seed = std::stoull(value());
    else if (a == "--only") only = value();
    else if (a == "--time-limit") time_limit_s = static_cast<unsigned>(std::stoul(value()));
    else if (a == "--show-unlocated") show_unlocated = true;
    else {
      std::fprintf(stderr,
                   "usage: fuzz_readers [--inputs N] [--seed S] [--only TARGET] [--time-limit SECONDS] [--show-unlocated]\n");
      return 2;
    }
  }
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) std::signal(sig, on_fatal);
  const char* src = std::getenv("TITAN_SOURCE_DIR");
  const std::string dir = titan::files::temp_dir() + "/titan-fuzz-" + std::to_string(::getpid());
  const std::string findings_dir = dir + "-findings";
  titan::files::make_directories(dir);
  titan::files::make_directories(findings_dir);
  std::vector<Target> targets = titan_fuzz::make_targets(dir, src && *src ? src : ".");

  std::printf("%-20s %8s %9s %8s %8s %9s %8s\n", "reader", "inputs", "accepted", "refused", "located", "findings",
              "seconds");
  int64_t total_findings = 0;
  std::vector<std::string> examples;
  for (size_t k = 0; k < targets.size(); ++k) {
    Target& target = targets[k];
    if (!only.empty() && target.name != only) continue;
    const Tally t = fuzz(target, inputs, seed * 1000 + k, time_limit_s, findings_dir);
    std::printf("%-20s %8lld %9lld %8lld %8lld %9lld %8.1f\n", target.name.c_str(), static_cast<long long>(t.inputs),
                static_cast<long long>(t.accepted), static_cast<long long>(t.refused), static_cast<long long>(t.located),
                static_cast<long long>(t.findings), t.seconds);
    if (show_unlocated)
      for (const auto& u : t.unlocated) std::printf("    unlocated: %s\n", u.c_str());
    std::fflush(stdout);
    total_findings += t.findings;
    for (const auto& e : t.examples) examples.push_back(target.name + ": " + e);
  }
  for (const auto& e : examples) std::printf("  ! %s\n", e.c_str());
  std::printf("%lld findings (inputs of findings kept in %s)\n", static_cast<long long>(total_findings),
              findings_dir.c_str());
  titan::files::remove_all(dir);
  if (total_findings == 0) titan::files::remove_all(findings_dir);
  return total_findings == 0 ? 0 : 1;
}
