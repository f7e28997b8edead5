// The config system: every shipped config loads, precedence and override
// forms, aliases, feature gating, and one clear line for every bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "support/error_of.hpp"
#include "support/run_command.hpp"
#include "support/temp_toml.hpp"
#include "titan/config/config.hpp"
#include "titan/config/suggest.hpp"
#include "titan/parallel/context_parallel/sharding.hpp"
#include "titan/util/error.hpp"

namespace fs = std::filesystem;
using namespace titan::config;
using titan::testing::required_error_of;
using titan::testing::TempToml;
using titan::testing::bin_path;
using titan::testing::run_command;
using titan::testing::source_path;

namespace {

JobConfig parse(std::vector<std::string> args) { return parse_job_config(args); }

std::string toml_error(const std::string& text) {
  TempToml f(text);
  return required_error_of([&] { parse({"--job.config_file", f.path()}); });
}

std::string cli_error(std::vector<std::string> args) {
  return required_error_of([&] { parse(args); });
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)
#define EXPECT_ONE_LINE(msg)                                          \
  do {                                                                \
    EXPECT_FALSE((msg).empty());                                      \
    EXPECT_EQ((msg).find('\n'), std::string::npos) << "message: " << (msg); \
  } while (0)

const char* kLlamaConfigs[] = {"llama3_8b.toml",      "llama3_70b.toml",       "llama3_405b.toml",
                              "llama3_8b_h100x8.toml", "llama3_70b_32gpu.toml", "llama3_405b_large.toml"};

}  // namespace

// ---------------------------------------------------------------- shipped files

TEST(ConfigFiles, EveryTrainConfigLoadsAndValidates) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(source_path("train_configs"))) {
    if (entry.path().extension() != ".toml") continue;
    SCOPED_TRACE(entry.path().string());
    JobConfig cfg = load_job_config(entry.path().string());
    EXPECT_EQ(cfg.job.config_file, entry.path().string());
    EXPECT_NO_THROW(validate(cfg));
    ++n;
  }
  EXPECT_GE(n, 7);
  for (const char* name : kLlamaConfigs) EXPECT_TRUE(fs::exists(source_path(std::string("train_configs/") + name))) << name;
}

TEST(ConfigFiles, Llama3_8bHoldsItsValues) {
  JobConfig c = load_job_config(source_path("train_configs/llama3_8b.toml"));
  EXPECT_EQ(c.job.dump_folder, "./outputs");
  EXPECT_EQ(c.job.description, "Llama 3 8B training");
  EXPECT_TRUE(c.profiling.enable_profiling);
  EXPECT_EQ(c.profiling.save_traces_folder, "profile_trace");
  EXPECT_EQ(c.profiling.profile_freq, 100);
  EXPECT_EQ(c.metrics.log_freq, 10);
  EXPECT_TRUE(c.metrics.enable_tensorboard);
  EXPECT_EQ(c.model.name, "llama3");
  EXPECT_EQ(c.model.flavor, "8B");
  EXPECT_EQ(c.model.norm_type, "rmsnorm");
  EXPECT_EQ(c.model.tokenizer_path, "./torchtitan/datasets/tokenizer/original/tokenizer.model");
  EXPECT_EQ(c.optimizer.name, "AdamW");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.training.batch_size, 8);
  EXPECT_EQ(c.training.seq_len, 2048);
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 200);  // llama3_8b.toml's [training] warmup_steps
  EXPECT_DOUBLE_EQ(c.training.max_norm, 1.0);
  EXPECT_EQ(c.training.steps, 1000);
  EXPECT_EQ(c.training.data_parallel_replicate_degree, 1);
  EXPECT_EQ(c.training.data_parallel_shard_degree, -1);
  EXPECT_EQ(c.training.tensor_parallel_degree, 1);
  EXPECT_FALSE(c.training.enable_loss_parallel);
  EXPECT_EQ(c.experimental.pipeline_parallel_degree, 1);
  EXPECT_TRUE(c.checkpoint.enable_checkpoint);
  EXPECT_EQ(c.checkpoint.folder, "checkpoint");
  EXPECT_EQ(c.checkpoint.interval_type, "steps");
  EXPECT_EQ(c.checkpoint.interval, 500);
  EXPECT_FALSE(c.checkpoint.model_weights_only);
  EXPECT_EQ(c.checkpoint.export_dtype, "float32");
  EXPECT_EQ(c.checkpoint.async_mode, "disabled");
  EXPECT_EQ(c.activation_checkpoint.mode, "selective");
  EXPECT_EQ(c.activation_checkpoint.selective_ac_option, "op");
  EXPECT_FALSE(c.float8.enable_float8_linear);
  EXPECT_EQ(c.origin.at("training.seq_len"), source_path("train_configs/llama3_8b.toml") + ":26");
}

TEST(ConfigFiles, LargeConfigsHoldTheirLayouts) {
  JobConfig h = load_job_config(source_path("train_configs/llama3_8b_h100x8.toml"));
  EXPECT_EQ(h.training.seq_len, 8192);
  EXPECT_EQ(h.training.data_parallel_shard_degree, 8);
  EXPECT_TRUE(h.float8.enable_float8_linear);
  EXPECT_DOUBLE_EQ(h.optimizer.lr, 1e-4);

  JobConfig l = load_job_config(source_path("train_configs/llama3_405b_large.toml"));
  EXPECT_EQ(l.training.data_parallel_replicate_degree, 4);
  EXPECT_EQ(l.training.data_parallel_shard_degree, 8);
  EXPECT_EQ(l.training.tensor_parallel_degree, 8);
  EXPECT_EQ(l.experimental.pipeline_parallel_degree, 8);
  EXPECT_EQ(l.training.batch_size, 8);  // PP 8's 1F1B needs 8 micro-batches
}

TEST(ConfigFiles, ConfigWithoutModelSectionIsCompletedFromDefaults) {
  const std::string path = source_path("train_configs/llama3_70b_32gpu.toml");
  JobConfig c = load_job_config(path);
  EXPECT_EQ(c.model.name, "llama3");
  EXPECT_EQ(c.model.flavor, "debugmodel");
  EXPECT_EQ(c.training.tensor_parallel_degree, 4);
  EXPECT_EQ(c.training.data_parallel_replicate_degree, 2);
  JobConfig big = parse({"--job.config_file", path, "--model.flavor", "70B"});
  EXPECT_EQ(big.model.flavor, "70B");
  EXPECT_EQ(big.training.seq_len, 4096);
}

TEST(ConfigFiles, DebugModelIsSmallAndSupported) {
  JobConfig c = load_job_config(source_path("train_configs/debug_model.toml"));
  EXPECT_EQ(c.model.flavor, "debugmodel");
  EXPECT_EQ(c.training.batch_size, 4);
  EXPECT_EQ(c.training.seq_len, 128);
  EXPECT_EQ(c.training.steps, 100);
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 10);
  EXPECT_EQ(c.model.tokenizer_path, "");
  EXPECT_EQ(c.training.dataset, "");
  EXPECT_NO_THROW(check_supported(c));
  EXPECT_NO_THROW(check_supported(JobConfig{}));  // the defaults run too
}

// ---------------------------------------------------------------- precedence and forms

TEST(ConfigPrecedence, DefaultsThenFileThenCommandLine) {
  TempToml f("[training]\nseq_len = 512\nsteps = 7\n");
  JobConfig d = parse({});
  EXPECT_EQ(d.training.seq_len, 2048);
  JobConfig c = parse({"--job.config_file", f.path()});
  EXPECT_EQ(c.training.seq_len, 512);
  EXPECT_EQ(c.training.batch_size, 8);  // untouched: default
  // The override wins even when written before the file.
  JobConfig o = parse({"--training.seq_len", "64", "--job.config_file", f.path()});
  EXPECT_EQ(o.training.seq_len, 64);
  EXPECT_EQ(o.training.steps, 7);
  EXPECT_EQ(o.origin.at("training.seq_len"), "command line --training.seq_len");
  EXPECT_EQ(o.origin.at("training.steps"), f.path() + ":3");
  // The last override wins.
  EXPECT_EQ(parse({"--training.seq_len=1", "--training.seq_len=2"}).training.seq_len, 2);
  // --job.config_file=F works too.
  EXPECT_EQ(parse({"--job.config_file=" + f.path()}).training.seq_len, 512);
}

TEST(ConfigOverrides, AllForms) {
  JobConfig c = parse({"--training.batch_size", "3", "--optimizer.lr=0.01", "--training.data_parallel_shard_degree",
                       "-1", "--model.flavor", "8B", "--training.deterministic", "--float8.enable_float8_linear=true",
                       "--metrics.enable_tensorboard", "false", "--profiling.enable_profiling=False",
                       "--job.description=a=b"});
  EXPECT_EQ(c.training.batch_size, 3);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.01);
  EXPECT_EQ(c.training.data_parallel_shard_degree, -1);
  EXPECT_EQ(c.model.flavor, "8B");
  EXPECT_TRUE(c.training.deterministic);
  EXPECT_TRUE(c.float8.enable_float8_linear);
  EXPECT_FALSE(c.metrics.enable_tensorboard);
  EXPECT_FALSE(c.profiling.enable_profiling);
  EXPECT_EQ(c.job.description, "a=b");
  // A bare boolean flag followed by another option.
  JobConfig b = parse({"--training.deterministic", "--training.seq_len", "5"});
  EXPECT_TRUE(b.training.deterministic);
  EXPECT_EQ(b.training.seq_len, 5);
  // Integers are fine where floats are expected.
  EXPECT_DOUBLE_EQ(parse({"--optimizer.lr", "1"}).optimizer.lr, 1.0);
}

TEST(ConfigOverrides, UnparsedArgumentsAreCollectedWhenAsked) {
  std::vector<std::string> rest;
  JobConfig c = parse_job_config({"--print-config", "--training.seq_len", "9", "extra"}, &rest);
  EXPECT_EQ(c.training.seq_len, 9);
  EXPECT_EQ(rest, (std::vector<std::string>{"--print-config", "extra"}));
  const std::string e = cli_error({"--print-config"});
  EXPECT_HAS(e, "unexpected argument '--print-config'");
  EXPECT_ONE_LINE(e);
}

TEST(ConfigOverrides, ArgvVersionSkipsProgramAndSubcommand) {
  const char* argv[] = {"titan", "config", "--training.steps", "12"};
  JobConfig c = parse_job_config(4, const_cast<char**>(argv), 2);
  EXPECT_EQ(c.training.steps, 12);
}

TEST(ConfigNormalize, EnumeratedValuesIgnoreCase) {
  TempToml f("[experimental]\npipeline_parallel_schedule = \"1f1b\"\n[optimizer]\nname = \"adamw\"\n");
  JobConfig c = parse({"--job.config_file", f.path(), "--activation_checkpoint.mode", "FULL"});
  EXPECT_EQ(c.experimental.pipeline_parallel_schedule, "1F1B");
  EXPECT_EQ(c.optimizer.name, "AdamW");
  EXPECT_EQ(c.activation_checkpoint.mode, "full");
  EXPECT_EQ(parse({"--experimental.pipeline_parallel_schedule", "interleaved1f1b"}).experimental.pipeline_parallel_schedule,
            "Interleaved1F1B");
}

// ---------------------------------------------------------------- aliases

TEST(ConfigAliases, TorchtitanV02NamesInAFile) {
  TempToml f(
      "[parallelism]\n"
      "data_parallel_replicate_degree = 2\n"
      "data_parallel_shard_degree = 4\n"
      "tensor_parallel_degree = 8\n"
      "context_parallel_degree = 2\n"
      "pipeline_parallel_degree = 4\n"
      "pipeline_parallel_schedule = \"Interleaved1F1B\"\n"
      "enable_async_tensor_parallel = true\n"
      "disable_loss_parallel = false\n"
      "[training]\n"
      "local_batch_size = 3\n"
      "global_batch_size = 48\n"
      "dataset_path = \"/data/c4\"\n"
      "[lr_scheduler]\n"
      "warmup_steps = 20\n"
      "decay_ratio = 0.8\n"
      "decay_type = \"cosine\"\n"
      "min_lr_factor = 0.1\n"
      "[checkpoint]\n"
      "enable = true\n"
      "[comm]\n"
      "train_timeout_seconds = 60\n");
  JobConfig c = parse({"--job.config_file", f.path()});
  EXPECT_EQ(c.training.data_parallel_replicate_degree, 2);
  EXPECT_EQ(c.training.data_parallel_shard_degree, 4);
  EXPECT_EQ(c.training.tensor_parallel_degree, 8);
  EXPECT_EQ(c.training.context_parallel_degree, 2);
  EXPECT_EQ(c.experimental.pipeline_parallel_degree, 4);
  EXPECT_EQ(c.experimental.pipeline_parallel_schedule, "Interleaved1F1B");
  EXPECT_TRUE(c.training.enable_async_tensor_parallel);
  EXPECT_TRUE(c.training.enable_loss_parallel);  // disable = false
  EXPECT_EQ(c.training.batch_size, 3);
  EXPECT_EQ(c.training.global_batch_size, 48);
  EXPECT_EQ(c.training.dataset_path, "/data/c4");  // its own option now (the files of a named dataset)
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 20);
  EXPECT_DOUBLE_EQ(c.lr_scheduler.decay_ratio, 0.8);
  EXPECT_EQ(c.lr_scheduler.decay_type, "cosine");
  EXPECT_DOUBLE_EQ(c.lr_scheduler.min_lr_factor, 0.1);
  EXPECT_TRUE(c.checkpoint.enable_checkpoint);
  EXPECT_EQ(c.comm.timeout_seconds, 60);
  EXPECT_EQ(c.origin.at("training.batch_size"), f.path() + ":11");
}

TEST(ConfigAliases, OnTheCommandLine) {
  JobConfig c = parse({"--parallelism.tensor_parallel_degree", "2", "--parallelism.disable_loss_parallel",
                       "--training.local_batch_size=5", "--training.warmup_steps", "3"});
  EXPECT_EQ(c.training.tensor_parallel_degree, 2);
  EXPECT_FALSE(c.training.enable_loss_parallel);
  EXPECT_EQ(c.training.batch_size, 5);
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 3);
  EXPECT_TRUE(parse({"--parallelism.disable_loss_parallel=false"}).training.enable_loss_parallel);
}

TEST(ConfigAliases, OneOptionTwiceInAFileIsAnError) {
  const std::string e = toml_error("[training]\nwarmup_steps = 5\n[lr_scheduler]\nwarmup_steps = 6\n");
  EXPECT_HAS(e, "[lr_scheduler] warmup_steps");
  EXPECT_HAS(e, "[training] warmup_steps");
  EXPECT_HAS(e, "job.toml:2");
  EXPECT_HAS(e, "job.toml:4");
  EXPECT_HAS(e, "keep one");
  EXPECT_ONE_LINE(e);
}

TEST(ConfigAliases, EveryAliasTargetsARealOptionOfItsType) {
  for (const Alias& a : aliases()) {
    SCOPED_TRACE(a.section + "." + a.key);
    Resolved r = resolve(a.section, a.key);
    ASSERT_NE(r.field, nullptr);
    EXPECT_EQ(r.field->name(), a.target);
    EXPECT_EQ(r.alias, &a);
    if (a.invert) EXPECT_EQ(r.field->type, FieldType::Bool);
    // An alias never shadows a canonical name.
    for (const Field& f : fields()) EXPECT_FALSE(f.section == a.section && f.key == a.key);
  }
}

// ---------------------------------------------------------------- feature gating

TEST(ConfigSupported, LaterFeaturesAreRefusedWithTheirChapter) {
  JobConfig c = parse({"--model.norm_type", "layernorm"});
  std::string e = required_error_of([&] { check_supported(c); });
  EXPECT_HAS(e, "not supported yet: [model] norm_type = \"layernorm\" (only rmsnorm is implemented");
  EXPECT_HAS(e, "--model.norm_type rmsnorm");
  EXPECT_ONE_LINE(e);
  // Tensor, loss, pipeline and context parallelism have landed: the gate lets them through.
  EXPECT_NO_THROW(check_supported(parse({"--parallelism.context_parallel_degree", "4",
                                         "--parallelism.context_parallel_rotate_method", "alltoall",
                                         "--parallelism.context_parallel_load_balancer", "contiguous"})));
  // torchtitan's command line spells "no load balancing" None: the
  // contiguous split.
  const JobConfig none = parse({"--parallelism.context_parallel_degree", "2",
                                "--parallelism.context_parallel_load_balancer", "None"});
  EXPECT_NO_THROW(check_supported(none));
  EXPECT_EQ(titan::cp::parse_load_balance(none.training.context_parallel_load_balancer),
            titan::cp::LoadBalance::contiguous);
  EXPECT_EQ(titan::cp::parse_load_balance("headtail"), titan::cp::LoadBalance::head_tail);
  EXPECT_NO_THROW(check_supported(parse({"--training.tensor_parallel_degree", "4", "--training.enable_loss_parallel",
                                         "--training.enable_async_tensor_parallel"})));
  EXPECT_NO_THROW(check_supported(parse({"--activation_checkpoint.mode", "full"})));
  EXPECT_NO_THROW(check_supported(parse({"--float8.enable_float8_linear"})));
  EXPECT_NO_THROW(check_supported(parse({"--activation_checkpoint.mode", "selective", "--activation_checkpoint.selective_ac_option", "2"})));
  EXPECT_NO_THROW(check_supported(parse({"--activation_checkpoint.mode", "selective", "--activation_checkpoint.selective_ac_option", "op"})));
  EXPECT_NO_THROW(check_supported(parse({"--experimental.pipeline_parallel_degree", "4",
                                         "--experimental.pipeline_parallel_schedule", "interleaved1f1b"})));

  // The seed 8B config passes the gate: checkpointing (lib/titan/checkpoint/),
  // profiling traces (lib/titan/profiling/), selective per-op activation
  // checkpointing and TensorBoard have all landed.
  JobConfig b = load_job_config(source_path("train_configs/llama3_8b.toml"));
  EXPECT_TRUE(unsupported_features(b).empty());
  EXPECT_NO_THROW(check_supported(b));
  EXPECT_NO_THROW(check_supported(parse({"--checkpoint.enable_checkpoint", "--checkpoint.async_mode", "async"})));
  EXPECT_NO_THROW(check_supported(parse({"--profiling.enable_profiling"})));
  EXPECT_NO_THROW(check_supported(parse({"--profiling.enable_memory_snapshot"})));
  EXPECT_NO_THROW(check_supported(parse({"--metrics.enable_tensorboard"})));

  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{"--model.norm_type", "layernorm"}, "only rmsnorm"},
      {{"--model.converters", "float8,mx"}, "float8 only"},
      {{"--activation_checkpoint.mode", "memory_budget"}, "memory-budget"},
  };
  EXPECT_EQ(cases.size(), feature_gates().size());
  for (const Case& k : cases) {
    SCOPED_TRACE(k.args[0]);
    JobConfig x = parse(k.args);
    const std::string m = required_error_of([&] { check_supported(x); });
    EXPECT_HAS(m, "not supported yet: ");
    EXPECT_HAS(m, k.expect);
    EXPECT_ONE_LINE(m);
  }
}

TEST(ConfigSupported, DataParallelDegreesAreSupported) {
  JobConfig c;  // data_parallel_shard_degree = -1: FSDP over every rank
  EXPECT_NO_THROW(check_supported(c, 1));
  EXPECT_NO_THROW(check_supported(c, 4));
  c.training.data_parallel_replicate_degree = 2;  // HSDP 2 x 2
  EXPECT_NO_THROW(check_supported(c, 4));
  c.training.data_parallel_replicate_degree = 4;  // DDP
  EXPECT_NO_THROW(check_supported(c, 4));
}

// ---------------------------------------------------------------- bad input

TEST(ConfigErrors, MissingFile) {
  const std::string e = cli_error({"--job.config_file", "/nonexistent/nope.toml"});
  EXPECT_HAS(e, "config file not found: /nonexistent/nope.toml");
  EXPECT_ONE_LINE(e);
  EXPECT_HAS(cli_error({"--job.config_file"}), "needs a value");
  EXPECT_HAS(cli_error({"--job.config_file", fs::temp_directory_path().string()}), "is a directory");
}

TEST(ConfigErrors, MalformedTomlNamesLineAndColumn) {
  std::string e = toml_error("[training]\nseq_len = 5\nbatch_size = = 3\n");
  EXPECT_HAS(e, "malformed TOML in ");
  EXPECT_HAS(e, "job.toml:3:");
  EXPECT_ONE_LINE(e);
  e = toml_error("[training\nseq_len = 5\n");
  EXPECT_HAS(e, "job.toml:1:");
  EXPECT_ONE_LINE(e);
  e = toml_error("[training]\nseq_len = 5\nseq_len = 6\n");  // TOML forbids redefinition
  EXPECT_HAS(e, "job.toml:3:");
  EXPECT_ONE_LINE(e);
}

TEST(ConfigErrors, UnknownSectionAndKeyNameTheClosestAndTheLine) {
  std::string e = toml_error("[job]\ndescription = \"x\"\n\n[trainig]\nseq_len = 5\n");
  EXPECT_HAS(e, "unknown config section [trainig]");
  EXPECT_HAS(e, "job.toml:4");
  EXPECT_HAS(e, "did you mean [training]?");
  EXPECT_ONE_LINE(e);

  e = toml_error("[training]\nbatch_size = 2\nseq_lne = 5\n");
  EXPECT_HAS(e, "unknown config key [training] seq_lne");
  EXPECT_HAS(e, "job.toml:3");
  EXPECT_HAS(e, "did you mean [training] seq_len?");
  EXPECT_ONE_LINE(e);

  // A real key in the wrong section points at its section.
  e = toml_error("[model]\nlr = 0.1\n");
  EXPECT_HAS(e, "unknown config key [model] lr");
  EXPECT_HAS(e, "did you mean [optimizer] lr?");

  // A key before any section header.
  e = toml_error("seq_len = 5\n");
  EXPECT_HAS(e, "outside any section");
  EXPECT_HAS(e, "did you mean [training] seq_len?");
  EXPECT_ONE_LINE(e);

  // Command line.
  e = cli_error({"--training.seq_lenn", "5"});
  EXPECT_HAS(e, "unknown option --training.seq_lenn");
  EXPECT_HAS(e, "did you mean --training.seq_len?");
  EXPECT_ONE_LINE(e);
  e = cli_error({"--trainig.steps=5"});
  EXPECT_HAS(e, "did you mean --training.steps?");
}

TEST(ConfigErrors, WrongTypes) {
  std::string e = toml_error("[training]\nseq_len = \"abc\"\n");
  EXPECT_HAS(e, "[training] seq_len: expected an integer, got string \"abc\" (");
  EXPECT_HAS(e, "job.toml:2)");
  EXPECT_ONE_LINE(e);
  EXPECT_HAS(toml_error("[training]\nseq_len = 2.5\n"), "expected an integer, got float 2.5");
  EXPECT_HAS(toml_error("[optimizer]\nlr = \"fast\"\n"), "[optimizer] lr: expected a float, got string \"fast\"");
  EXPECT_HAS(toml_error("[profiling]\nenable_profiling = \"true\"\n"),
             "[profiling] enable_profiling: expected a boolean, got string \"true\"");
  EXPECT_HAS(toml_error("[model]\nflavor = 8\n"), "[model] flavor: expected a string, got integer 8");
  EXPECT_HAS(toml_error("[model]\nflavor = [\"8B\"]\n"), "expected a string, got an array");
  EXPECT_HAS(toml_error("training = 5\n"), "[training] must be a table");
  EXPECT_HAS(toml_error("[parallelism]\ndisable_loss_parallel = 1\n"),
             "[parallelism] disable_loss_parallel: expected a boolean, got integer 1");

  e = cli_error({"--training.seq_len", "abc"});
  EXPECT_HAS(e, "[training] seq_len: expected an integer, got \"abc\" (command line --training.seq_len)");
  EXPECT_ONE_LINE(e);
  EXPECT_HAS(cli_error({"--training.seq_len=12x"}), "expected an integer, got \"12x\"");
  EXPECT_HAS(cli_error({"--optimizer.lr", "nan"}), "[optimizer] lr: expected a float");
  EXPECT_HAS(cli_error({"--training.deterministic=maybe"}), "expected a boolean, got \"maybe\"");
  EXPECT_HAS(cli_error({"--training.seq_len"}), "--training.seq_len needs a value");
}

TEST(ConfigErrors, OutOfRangeValues) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{"--training.seq_len", "0"}, "[training] seq_len = 0 is out of range: must be > 0 (command line --training.seq_len)"},
      {{"--training.seq_len", "-5"}, "[training] seq_len = -5 is out of range: must be > 0"},
      {{"--training.batch_size", "0"}, "[training] batch_size = 0 is out of range: must be > 0"},
      {{"--training.steps", "-1"}, "[training] steps = -1 is out of range"},
      {{"--optimizer.lr", "0"}, "[optimizer] lr = 0.0 is out of range: must be > 0"},
      {{"--optimizer.lr", "-1e-4"}, "[optimizer] lr = -0.0001 is out of range"},
      {{"--optimizer.beta2", "1"}, "[optimizer] beta2 = 1.0 is out of range: must be in [0, 1)"},
      {{"--metrics.log_freq", "0"}, "[metrics] log_freq = 0 is out of range: must be > 0"},
      {{"--training.tensor_parallel_degree", "0"}, "[training] tensor_parallel_degree = 0 is out of range: must be >= 1"},
      {{"--training.tensor_parallel_degree", "-1"}, "[training] tensor_parallel_degree = -1 is out of range"},
      {{"--training.data_parallel_shard_degree", "0"}, "must be >= 1, or -1 (the remaining ranks)"},
      {{"--training.data_parallel_shard_degree", "-2"}, "[training] data_parallel_shard_degree = -2 is out of range"},
      {{"--training.data_parallel_replicate_degree", "0"}, "[training] data_parallel_replicate_degree = 0"},
      {{"--experimental.pipeline_parallel_degree", "0"}, "[experimental] pipeline_parallel_degree = 0"},
      {{"--parallelism.context_parallel_degree", "0"}, "[training] context_parallel_degree = 0"},
      {{"--lr_scheduler.decay_ratio", "1.5"}, "[lr_scheduler] decay_ratio = 1.5 is out of range"},
      {{"--lr_scheduler.min_lr_factor", "2"}, "[lr_scheduler] min_lr_factor = 2.0 is out of range"},
      {{"--training.global_batch_size", "0"}, "[training] global_batch_size = 0 is out of range"},
      {{"--checkpoint.interval", "0"}, "[checkpoint] interval = 0 is out of range"},
      {{"--comm.timeout_seconds", "0"}, "[comm] timeout_seconds = 0 is out of range"},
      {{"--activation_checkpoint.selective_ac_option", "x"}, "[activation_checkpoint] selective_ac_option = \"x\""},
      {{"--checkpoint.interval_type", "step"},
       "[checkpoint] interval_type = \"step\" is not valid: expected one of \"steps\", \"seconds\" (command line"},
      {{"--activation_checkpoint.mode", "some"},
       "[activation_checkpoint] mode = \"some\" is not valid: expected one of \"none\", \"selective\", \"full\""},
      {{"--checkpoint.async_mode", "sync"}, "\"disabled\", \"async\", \"async_with_pinned_mem\""},
      {{"--lr_scheduler.decay_type", "exp"}, "[lr_scheduler] decay_type = \"exp\" is not valid"},
      {{"--training.device", "tpu"}, "[training] device = \"tpu\" is not valid: expected one of \"auto\", \"cpu\", \"cuda\""},
      {{"--model.name", "gpt"}, "[model] name = \"gpt\" is not valid"},
      {{"--optimizer.name", "SGD"}, "[optimizer] name = \"SGD\" is not valid"},
      {{"--checkpoint.last_save_in_hf", "true"},
       "[checkpoint] model_weights_only = false is out of range: must be true with last_save_in_hf"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.args[0]);
    const std::string e = cli_error(k.args);
    EXPECT_HAS(e, k.expect);
    EXPECT_ONE_LINE(e);
  }
  // From a file, the message names file:line.
  const std::string e = toml_error("[training]\nbatch_size = 1\nseq_len = 0\n");
  EXPECT_HAS(e, "[training] seq_len = 0 is out of range: must be > 0 (");
  EXPECT_HAS(e, "job.toml:3)");
  EXPECT_HAS(toml_error("[checkpoint]\ninterval_type = \"minutes\"\n"), "job.toml:2)");
}

// ---------------------------------------------------------------- printing, docs, batches

TEST(ConfigPrint, ToTomlRoundTrips) {
  JobConfig c = parse({"--job.config_file", source_path("train_configs/llama3_8b.toml"), "--job.description",
                       "quote \" and \\ back", "--optimizer.lr", "3e-4", "--lr_scheduler.decay_ratio", "0.1"});
  const std::string text = c.to_toml();
  EXPECT_HAS(text, "[training]\n");
  EXPECT_HAS(text, "lr = 0.0003\n");
  EXPECT_HAS(text, "max_norm = 1.0\n");
  TempToml f(text);
  JobConfig back = parse({"--job.config_file", f.path()});
  back.job.config_file = c.job.config_file;
  EXPECT_EQ(back.to_toml(), text);
  EXPECT_EQ(back.job.description, "quote \" and \\ back");
  // Every option appears once.
  for (const Field& fd : fields()) EXPECT_HAS(text, "\n" + fd.key + " = ");
}

TEST(ConfigDocs, DocsHoldTheGeneratedReference) {
  std::ifstream in(source_path("docs/config.md"));
  ASSERT_TRUE(in) << "docs/config.md missing";
  std::stringstream doc;
  doc << in.rdbuf();
  EXPECT_NE(doc.str().find(markdown_reference()), std::string::npos)
      << "docs/config.md is out of date: paste the output of `titan config --markdown` into it";
  for (const FeatureGate& g : feature_gates()) EXPECT_HAS(doc.str(), g.reason);
}

TEST(ConfigBatches, GlobalBatchAndAccumulation) {
  JobConfig c;
  c.training.batch_size = 4;
  BatchPlan p = plan_batches(c, 2);
  EXPECT_EQ(p.global_batch, 8);
  EXPECT_EQ(p.accumulation_steps, 1);
  c.training.global_batch_size = 32;
  p = plan_batches(c, 2);
  EXPECT_EQ(p.accumulation_steps, 4);
  EXPECT_EQ(p.local_batch, 4);
  c.training.gradient_accumulation_steps = 4;
  EXPECT_EQ(plan_batches(c, 2).global_batch, 32);
  c.training.gradient_accumulation_steps = 3;
  std::string e = required_error_of([&] { plan_batches(c, 2); });
  EXPECT_HAS(e, "disagrees");
  EXPECT_ONE_LINE(e);
  c.training.gradient_accumulation_steps = -1;
  c.training.global_batch_size = 30;
  e = required_error_of([&] { plan_batches(c, 2); });
  EXPECT_HAS(e, "[training] global_batch_size = 30 is not a multiple of batch_size x data-parallel degree = 4 x 2");
  c.training.global_batch_size = -1;
  c.training.gradient_accumulation_steps = 3;
  EXPECT_EQ(plan_batches(c, 1).global_batch, 12);
}

TEST(ConfigSuggest, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("seq_lne", "seq_len"), 2u);
  EXPECT_EQ(closest("trainig", {"job", "training", "model"}), "training");
}

// ---------------------------------------------------------------- the `titan config` program

TEST(ConfigCli, PrintsTheEffectiveConfig) {
  auto r = run_command(bin_path("titan") + " config --job.config_file " + source_path("train_configs/debug_model.toml") +
                       " --training.steps 3");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "steps = 3\n");
  EXPECT_HAS(r.output, "flavor = \"debugmodel\"\n");
}

TEST(ConfigCli, BadInputIsOneLineAndExitsNonZero) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" config --job.config_file /nonexistent.toml", "error: config file not found: /nonexistent.toml"},
      {" config --training.seq_len 0", "error: [training] seq_len = 0 is out of range"},
      {" config --training.seq_lne 5", "did you mean --training.seq_len?"},
      {" config --check-supported --job.config_file " + source_path("train_configs/llama3_70b.toml") +
           " --model.norm_type layernorm",
       "error: not supported yet: [model] norm_type = \"layernorm\""},
  };
  for (const auto& [args, expect] : cases) {
    SCOPED_TRACE(args);
    auto r = run_command(bin_path("titan") + args);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_HAS(r.output, expect);
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
}
