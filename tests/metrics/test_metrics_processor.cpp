// The log line's exact text, the interval arithmetic of MetricsProcessor,
// the JSONL file and the live progress line.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "titan/metrics/metrics_processor.hpp"

using namespace titan::metrics;

namespace {

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::string temp_file(const std::string& name) {
  return "/tmp/" + name + std::to_string(::getpid());
}

}  // namespace

TEST(LogLine, TorchtitanFormatPlusLrAndEta) {
  LogRecord r;
  r.step = 10;
  r.loss = 7.23451;
  r.grad_norm = 1.23;
  r.lr = 3e-4;
  MemoryStats m;
  m.peak_bytes = int64_t(5) << 28;  // 1.25 GiB
  m.peak_pct = 3.75;
  r.memory = m;
  r.tps = 12345.4;
  r.tflops = 1.234;
  r.mfu_pct = 12.344;
  r.eta_seconds = 83;
  EXPECT_EQ(format_log_line(r),
            "step: 10  loss:  7.2345  grad_norm:  1.2300  lr: 3.0000e-04  memory:  1.25GiB(3.75%)"
            "  tps: 12,345  tflops: 1.23  mfu: 12.34%  eta: 1:23");
  r.tflops = 12345.678;
  EXPECT_NE(format_log_line(r).find("tflops: 12,345.68"), std::string::npos);
  // Unknown quantities are left out rather than printed as 0.
  LogRecord bare;
  bare.step = 1;
  bare.tps = 10;
  EXPECT_EQ(format_log_line(bare), "step:  1  loss:  0.0000  grad_norm:  0.0000  lr: 0.0000e+00  tps: 10");
}

TEST(MetricsProcessor, IntervalsRatesAndJsonl) {
  const std::string path = temp_file("titan_metrics_");
  std::remove(path.c_str());
  std::ostringstream out;
  MetricsOptions o;
  o.log_freq = 5;
  o.total_steps = 10;
  o.flops_per_token = 1e6;
  o.peak_flops = 1e12;
  o.num_ranks = 2;
  o.jsonl_path = path;
  o.progress = 0;
  o.out = &out;
  std::vector<LogRecord> logged;
  {
    MetricsProcessor mp(o);
    for (int64_t s = 1; s <= 10; ++s) {
      StepInput in;
      in.step = s;
      in.loss = 10.0 - s;
      in.grad_norm = 1.0;
      in.lr = 1e-3;
      in.tokens = 1000;
      in.step_seconds = s == 1 ? 2.0 : 0.5;  // step 1 is slow (warm-up)
      in.data_seconds = 0.1;
      auto r = mp.record(in);
      EXPECT_EQ(r.has_value(), s == 1 || s == 5 || s == 10) << s;
      if (r) logged.push_back(*r);
    }
  }
  ASSERT_EQ(logged.size(), 3u);
  // Step 1: 1000 tokens / 2 s / 2 ranks = 250 tokens/s per rank.
  EXPECT_DOUBLE_EQ(logged[0].tps, 250);
  // Steps 2-5: 4000 tokens / 2 s / 2 ranks = 1000 per rank; 1e6 FLOPs per
  // token → 1e9 FLOP/s = 0.001 TFLOPs, 0.1 % of 1e12.
  EXPECT_EQ(logged[1].interval_steps, 4);
  EXPECT_DOUBLE_EQ(logged[1].tps, 1000);
  EXPECT_DOUBLE_EQ(logged[1].tflops, 0.001);
  EXPECT_DOUBLE_EQ(logged[1].mfu_pct, 0.1);
  EXPECT_DOUBLE_EQ(logged[1].step_seconds, 0.5);
  EXPECT_DOUBLE_EQ(logged[1].data_seconds, 0.1);
  EXPECT_DOUBLE_EQ(logged[1].eta_seconds, 2.5);  // 5 steps left × 0.5 s
  EXPECT_DOUBLE_EQ(logged[1].elapsed_seconds, 4.0);
  EXPECT_EQ(logged[1].tokens_seen, 5000);
  EXPECT_DOUBLE_EQ(logged[2].eta_seconds, 0);
  ASSERT_TRUE(logged[2].memory.has_value());
  EXPECT_GT(logged[2].memory->peak_bytes, 0);

  auto lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 3u) << out.str();
  EXPECT_EQ(lines[1].rfind("step:  5  loss:  5.0000", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("tps: 1,000"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("mfu: 0.10%"), std::string::npos) << lines[1];

  // One JSONL record per step, each a parseable object.
  std::ifstream in(path);
  std::vector<nlohmann::json> recs;
  for (std::string l; std::getline(in, l);) recs.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(recs.size(), 10u);
  EXPECT_EQ(recs[6]["step"], 7);
  EXPECT_DOUBLE_EQ(recs[6]["tps"].get<double>(), 1000);  // one step: 1000 / 0.5 / 2
  EXPECT_DOUBLE_EQ(recs[6]["loss"].get<double>(), 3.0);
  EXPECT_FALSE(recs[6].contains("memory"));
  EXPECT_TRUE(recs[4].contains("memory"));  // log steps carry the memory reading
  std::remove(path.c_str());
}

TEST(MetricsProcessor, NonFiniteLossIsJsonNull) {
  const std::string path = temp_file("titan_metrics_nan_");
  std::remove(path.c_str());
  std::ostringstream out;
  MetricsOptions o;
  o.jsonl_path = path;
  o.jsonl_every_step = false;
  o.out = &out;
  o.progress = 0;
  {
    MetricsProcessor mp(o);
    StepInput in;
    in.step = 1;
    in.loss = std::nan("");
    in.tokens = 10;
    in.step_seconds = 1;
    mp.record(in);
  }
  std::ifstream f(path);
  std::string l;
  std::getline(f, l);
  EXPECT_TRUE(nlohmann::json::parse(l)["loss"].is_null()) << l;
  std::remove(path.c_str());
}

TEST(MetricsProcessor, ProgressLineRedrawsInPlace) {
  std::ostringstream out;
  MetricsOptions o;
  o.log_freq = 3;
  o.total_steps = 4;
  o.progress = 1;
  o.out = &out;
  {
    MetricsProcessor mp(o);
    for (int64_t s = 1; s <= 2; ++s) {
      StepInput in;
      in.step = s;
      in.tokens = 100;
      in.step_seconds = 0.25;
      mp.record(in);
    }
    mp.print("a warning");
  }
  const std::string s = out.str();
  // Step 1 logs a full line; step 2 draws "\rstep 2/4 ..."; print() clears it.
  EXPECT_NE(s.find("\rstep 2/4  loss 0.0000  tps 400  eta 1s\x1b[K"), std::string::npos) << s;
  EXPECT_NE(s.find("\r\x1b[Ka warning\n"), std::string::npos) << s;
  EXPECT_EQ(s.back(), '\n');
}

TEST(MetricsProcessor, BadJsonlPathIsAnError) {
  MetricsOptions o;
  o.jsonl_path = "/nonexistent-dir/metrics.jsonl";
  EXPECT_THROW(MetricsProcessor mp(o), std::exception);
}
