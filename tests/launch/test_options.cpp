// OptionParser (lib/titan/launch/options): both spellings of a value, the
// types it checks, and the one-line errors and usage a person reads.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "support/run_command.hpp"
#include "titan/launch/local_launcher.hpp"
#include "titan/launch/options.hpp"
#include "titan/util/error.hpp"

namespace {

using titan::testing::bin_path;
using titan::testing::run_command;

struct Options {
  std::string dtype = "fp32";
  std::string device = "cpu";
  std::string mode = "fsdp";
  int64_t steps = 5;
  double bucket_mb = 0.1;
  bool offload = false;
};

struct Parser {
  Options o;
  titan::OptionParser p{"prog", "what prog shows"};
  Parser() {
    p.add("--dtype", &o.dtype, "fp32|bf16", {"fp32", "bf16"});
    p.add("--device", &o.device, "where to train");
    p.add("--mode", &o.mode, "technique", {"ddp", "fsdp", "hsdp"});
    p.add("--steps", &o.steps, "optimizer steps");
    p.add("--bucket-mb", &o.bucket_mb, "bucket size");
    p.flag("--offload", &o.offload, "CPU offload");
  }
  // Parses `args` as the program's arguments (argv[0] is the program).
  void parse(std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    p.parse(static_cast<int>(argv.size()), argv.data());
  }
  // The message parse() throws for `args`, "" when it accepts them.
  std::string error_of(std::vector<std::string> args) {
    try {
      parse(std::move(args));
    } catch (const titan::Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST(OptionParser, NothingGivenKeepsTheDefaults) {
  Parser t;
  t.parse({});
  EXPECT_EQ(t.o.dtype, "fp32");
  EXPECT_EQ(t.o.steps, 5);
  EXPECT_DOUBLE_EQ(t.o.bucket_mb, 0.1);
  EXPECT_FALSE(t.o.offload);
}

TEST(OptionParser, SpaceAndEqualsSpellings) {
  Parser t;
  t.parse({"--dtype", "bf16", "--steps=12", "--bucket-mb", "2.5", "--device=cuda:1", "--offload"});
  EXPECT_EQ(t.o.dtype, "bf16");
  EXPECT_EQ(t.o.steps, 12);
  EXPECT_DOUBLE_EQ(t.o.bucket_mb, 2.5);
  EXPECT_EQ(t.o.device, "cuda:1");
  EXPECT_TRUE(t.o.offload);
}

TEST(OptionParser, LaterValueWinsAndNegativeNumbersAreValues) {
  Parser t;
  t.parse({"--steps", "3", "--steps", "-4", "--bucket-mb=-1e-3"});
  EXPECT_EQ(t.o.steps, -4);  // the range is the program's to check
  EXPECT_DOUBLE_EQ(t.o.bucket_mb, -1e-3);
}

TEST(OptionParser, EqualsKeepsTheRestOfTheValue) {
  Parser t;
  t.parse({"--device=a=b"});
  EXPECT_EQ(t.o.device, "a=b");
}

TEST(OptionParser, ErrorsAreOneLineAndNameTheOption) {
  Parser t;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--steps", "2.5"}, "--steps: '2.5' is not an integer"},
      {{"--steps=abc"}, "--steps: 'abc' is not an integer"},
      {{"--steps="}, "--steps: '' is not an integer"},
      {{"--steps", "99999999999999999999"}, "--steps: '99999999999999999999' is not an integer"},
      {{"--bucket-mb", "x1"}, "--bucket-mb: 'x1' is not a number"},
      {{"--bucket-mb", "nan"}, "--bucket-mb: 'nan' is not a number"},
      {{"--dtype", "fp16"}, "--dtype takes fp32 or bf16, got 'fp16'"},
      {{"--mode=FSDP"}, "--mode takes ddp, fsdp or hsdp, got 'FSDP'"},
      {{"--steps"}, "--steps needs a value (N)"},
      {{"--offload=yes"}, "--offload takes no value (got '--offload=yes')"},
      {{"--stepz", "3"}, "unknown option '--stepz' (did you mean --steps?) (try --help)"},
      {{"--frobnicate"}, "unknown option '--frobnicate' (try --help)"},
      {{"steps"}, "unexpected argument 'steps' (options start with --; try --help)"},
      {{"-s"}, "unexpected argument '-s' (options start with --; try --help)"},
  };
  for (const auto& [args, want] : cases) {
    const std::string got = t.error_of(args);
    EXPECT_EQ(got, want) << "arguments: " << args.front();
    EXPECT_EQ(got.find('\n'), std::string::npos) << got;
  }
}

TEST(OptionParser, UsageListsEveryOptionWithItsDefault) {
  Parser t;
  const std::string u = t.p.usage();
  std::printf("%s", u.c_str());
  EXPECT_EQ(u.rfind("usage: prog [options]\nwhat prog shows\n", 0), 0u) << u;
  EXPECT_NE(u.find("--dtype fp32|bf16"), std::string::npos) << u;
  EXPECT_NE(u.find("(default: fp32)"), std::string::npos) << u;
  EXPECT_NE(u.find("--steps N"), std::string::npos) << u;
  EXPECT_NE(u.find("optimizer steps (default: 5)"), std::string::npos) << u;
  EXPECT_NE(u.find("--bucket-mb X"), std::string::npos) << u;
  EXPECT_NE(u.find("bucket size (default: 0.1)"), std::string::npos) << u;
  EXPECT_NE(u.find("--offload "), std::string::npos) << u;
  EXPECT_EQ(u.find("CPU offload (default"), std::string::npos) << "a flag that is off has no default to show";
  // What run_main takes before the program parses is documented all the same.
  EXPECT_NE(u.find("--nproc N"), std::string::npos) << u;
  EXPECT_NE(u.find("--master-port P"), std::string::npos) << u;
  EXPECT_NE(u.find("-h, --help"), std::string::npos) << u;
}

// --help exits the process, so it is checked on the programs themselves,
// the way a user meets it: through run_main, then the program's parser.
TEST(OptionParser, ProgramsPrintUsageForHelpAndOneLineErrors) {
  for (const std::string prog : {"ch01_data_parallel", "ch02_fsdp2"}) {
    for (const char* help : {" --help", " --steps 3 -h --not-an-option"}) {
      auto r = run_command(bin_path(prog) + help);
      EXPECT_EQ(r.exit_code, 0) << prog << help << ": " << r.output;
      EXPECT_EQ(r.output.rfind("usage: " + prog + " [options]\n", 0), 0u) << r.output;
      EXPECT_NE(r.output.find("--steps N"), std::string::npos) << r.output;
    }
    auto r = run_command(bin_path(prog) + " --steps 2x");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output, "error: --steps: '2x' is not an integer\n");
  }
}

TEST(OptionParser, BadRegistrationIsAnError) {
  Options o;
  titan::OptionParser p("prog", "");
  p.add("--steps", &o.steps, "");
  EXPECT_THROW(p.add("--steps", &o.steps, ""), titan::Error);
  EXPECT_THROW(p.add("steps", &o.steps, ""), titan::Error);
  EXPECT_THROW(p.add("--a=b", &o.steps, ""), titan::Error);
  EXPECT_THROW(p.add("--nproc", &o.steps, ""), titan::Error);
  EXPECT_THROW(p.flag("--help", &o.offload, ""), titan::Error);
}

}  // namespace

// The rendezvous port `titan run` picks lies outside the kernel's ephemeral
// range, where outgoing connections (other jobs' Gloo pairs) take their
// ports: a port picked inside it was once taken by another test's
// connection between the pick and rank 0's bind ("already in use"). It is
// free when picked, and two picks rarely agree.
TEST(LocalLauncher, PicksTheStorePortOutsideTheEphemeralRange) {
  int lo = 32768, hi = 60999;
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    ASSERT_EQ(std::fscanf(f, "%d %d", &lo, &hi), 2);
    std::fclose(f);
  }
  std::set<int> seen;
  for (int i = 0; i < 20; ++i) {
    const int port = titan::launch::pick_free_port();
    EXPECT_TRUE(port < lo || port > hi) << port << " is in the ephemeral range " << lo << "-" << hi;
    EXPECT_GE(port, 1024);
    seen.insert(port);
  }
  std::printf("20 picks: %zu distinct ports, ephemeral range %d-%d\n", seen.size(), lo, hi);
  EXPECT_GE(seen.size(), 15u);
}
