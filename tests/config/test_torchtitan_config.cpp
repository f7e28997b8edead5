// torchtitan v0.2 configs: every key of its JobConfig loads at its
// default, features titan lacks are refused when turned on, cosmetic keys
// pass, string lists parse from TOML and the command line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "support/error_of.hpp"
#include "support/run_command.hpp"
#include "support/temp_toml.hpp"
#include "titan/config/config.hpp"
#include "titan/util/error.hpp"

namespace fs = std::filesystem;
using namespace titan::config;
using titan::testing::required_error_of;
using titan::testing::TempToml;
using titan::testing::source_path;

namespace {

// torchtitan 0.2.2's JobConfig defaults, written out by hand from
// torchtitan/config/job_config.py (keys whose default is None left out:
// TOML has no None). Independent of torchtitan_keys(), so a row missing
// from that table fails the comparison below.
const char* kTorchtitanDefaults = R"(
[job]
dump_folder = "./outputs"
description = "default job"
print_config = false
custom_config_module = ""

[profiling]
enable_profiling = false
save_traces_folder = "profile_traces"
profile_freq = 10
profiler_active = 1
profiler_warmup = 3
enable_memory_snapshot = false
save_memory_snapshot_folder = "memory_snapshot"

[metrics]
log_freq = 10
enable_tensorboard = false
disable_color_printing = false
save_tb_folder = "tb"
save_for_all_ranks = false
enable_wandb = false

[model]
name = "llama3"
flavor = "debugmodel"
hf_assets_path = "./tests/assets/tokenizer"
converters = []
print_after_conversion = false

[optimizer]
name = "AdamW"
lr = 0.0008
beta1 = 0.9
beta2 = 0.95
eps = 1e-08
weight_decay = 0.1
implementation = "fused"
early_step_in_backward = false

[lr_scheduler]
warmup_steps = 200
decay_type = "linear"
min_lr_factor = 0.0

[training]
dataset = "c4_test"
local_batch_size = 8
global_batch_size = -1
seq_len = 2048
max_norm = 1.0
steps = 10000
enable_cpu_offload = false
dtype = "float32"
mixed_precision_param = "bfloat16"
mixed_precision_reduce = "float32"
gc_freq = 50
gc_debug = false

[training.dataloader]
num_workers = 0
persistent_workers = false
pin_memory = false

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
fsdp_reshard_after_forward = "default"
tensor_parallel_degree = 1
disable_loss_parallel = false
enable_async_tensor_parallel = false
pipeline_parallel_degree = 1
pipeline_parallel_first_stage_less_layers = 1
pipeline_parallel_last_stage_less_layers = 1
pipeline_parallel_schedule = "1F1B"
pipeline_parallel_schedule_csv = ""
pipeline_parallel_microbatch_size = 1
pipeline_parallel_expert_parallel_overlap = true
context_parallel_degree = 1
context_parallel_load_balancer = "headtail"
context_parallel_rotate_method = "allgather"
expert_parallel_degree = 1
expert_tensor_parallel_degree = 1
expert_parallel_comm_backend = "standard"

[checkpoint]
enable = false
enable_ft_dataloader_checkpoints = true
folder = "checkpoint"
interval = 500
initial_load_model_only = true
initial_load_in_hf = false
initial_load_in_hf_quantized = false
last_save_model_only = true
last_save_in_hf = false
export_dtype = "float32"
async_mode = "disabled"
keep_latest_k = 10
load_step = -1
exclude_from_loading = []
enable_first_step_checkpoint = false
create_seed_checkpoint = false
load_only = false

[activation_checkpoint]
mode = "selective"
selective_ac_option = "2"
per_op_sac_force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]
early_stop = false
memory_budget = 0.5
visualize_memory_budget_pareto = false
preserve_rng_state = true
determinism_check = "default"
debug = false

[compile]
enable = false
components = ["model", "loss"]
backend = "inductor"

[quantize.linear.float8]
enable_fsdp_float8_all_gather = false
precompute_float8_dynamic_scale_for_fsdp = false
filter_fqns = []
emulate = false

[quantize.linear.mx]
mxfp8_dim1_cast_kernel_choice = "triton"
recipe_name = "mxfp8_cublas"
filter_fqns = ["output"]

[quantize.grouped_mm.float8]
fqns = []

[quantize.grouped_mm.mx]
recipe_name = "mxfp8"
fqns = []

[comm]
init_timeout_seconds = 300
train_timeout_seconds = 100
trace_buf_size = 20000
save_traces_folder = "comm_traces"
save_traces_file_prefix = "rank_"
mode = "default"

[memory_estimation]
enable = false
disable_fake_mode = false

[fault_tolerance]
enable = false
process_group = "gloo"
process_group_timeout_ms = 10000
replica_id = 0
group_size = 0
min_replica_size = 1

[experimental]
custom_import = ""
custom_args_module = ""

[validation]
enable = false
dataset = "c4_validation"
local_batch_size = 8
seq_len = 2048
freq = 10
steps = -1

[validation.dataloader]
num_workers = 0
persistent_workers = false
pin_memory = false

[debug]
deterministic = false
deterministic_warn_only = false
moe_force_load_balance = false
)";


JobConfig load_text(const std::string& text) {
  TempToml t(text);
  return load_job_config(t.path());
}

// "section.key" of every key in a TOML text of plain [section] headers and
// `key = value` lines.
std::set<std::string> keys_in(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.front() == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    out.insert(section + "." + line.substr(0, line.find(' ')));
  }
  return out;
}

// The table's own defaults as a TOML file (None rows left out), one table
// per section (the custom modules' rows add keys to earlier sections).
std::string table_defaults_toml() {
  std::vector<std::string> order;
  std::map<std::string, std::string> lines;
  for (const TorchtitanKey& k : torchtitan_keys()) {
    if (!k.default_value) continue;
    if (!lines.count(k.section)) order.push_back(k.section);
    lines[k.section] += k.key + " = " + to_toml_value(*k.default_value) + "\n";
  }
  std::ostringstream os;
  for (const std::string& s : order) os << "\n[" << s << "]\n" << lines[s];
  return os.str();
}

// A value of `type` other than `d` (the default, when there is one).
std::string other_value_text(const TorchtitanKey& k) {
  switch (k.type) {
    case FieldType::Bool: return k.default_value && std::get<bool>(*k.default_value) ? "false" : "true";
    case FieldType::Int: return std::to_string((k.default_value ? std::get<int64_t>(*k.default_value) : 0) + 7);
    case FieldType::Float: return "0.125";
    case FieldType::String: return "something_else";
    case FieldType::StringList: return "a,b";
    case FieldType::StringLists: return "a,b;c";
  }
  return "";
}

}  // namespace

TEST(TorchtitanConfig, HandWrittenDefaultsMatchTheTable) {
  std::set<std::string> table;
  for (const TorchtitanKey& k : torchtitan_keys())
    if (k.default_value && k.module.empty()) table.insert(k.name());
  const std::set<std::string> hand = keys_in(kTorchtitanDefaults);
  for (const std::string& n : hand) EXPECT_TRUE(table.count(n)) << n << " is missing from torchtitan_keys()";
  for (const std::string& n : table) EXPECT_TRUE(hand.count(n)) << n << " is not a torchtitan v0.2 key";
  // Every section torchtitan has, by hand (including the None-only ones).
  std::set<std::string> sections;
  for (const TorchtitanKey& k : torchtitan_keys())
    if (k.module.empty()) sections.insert(k.section);
  for (const char* s : {"job", "profiling", "metrics", "model", "optimizer", "lr_scheduler", "training",
                        "training.dataloader", "parallelism", "checkpoint", "activation_checkpoint", "compile",
                        "quantize.linear.float8", "quantize.linear.mx", "quantize.grouped_mm.float8",
                        "quantize.grouped_mm.mx", "comm", "memory_estimation", "fault_tolerance", "experimental",
                        "validation", "validation.dataloader", "debug"})
    EXPECT_TRUE(sections.erase(s)) << "[" << s << "] missing from torchtitan_keys()";
  EXPECT_TRUE(sections.empty()) << "unexpected section [" << *sections.begin() << "]";
}

// The keys torchtitan's own custom_config_modules add (v0.2.0-v0.2.2), by
// hand from their job_config.py files, module by module (None defaults left
// out): components/ft/config (Streaming DiLoCo), experiments/autoparallel,
// compiler_toolkit, transformers_modeling_backend, vlm, and models/flux.
const char* kTorchtitanModuleDefaults = R"(
[fault_tolerance]
sync_steps = 5
should_quantize = false
fragment_sync_delay = 0
fragment_update_alpha = 0.0
module_fqns_per_model_fragment = []
num_fragments = 1
[experimental]
comms_bucket_reorder_strategy = "aten"
autop_force_bf16 = false
[compile]
joint_passes = []
passes = []
[hf_transformers]
model = ""
[data]
max_images_per_batch = 10
max_patches_per_image = 256
patch_size = 16
spatial_merge_size = 1
packing_buffer_size = 0
[training]
classifier_free_guidance_prob = 0.0
img_size = 256
test_mode = false
[encoder]
t5_encoder = "google/t5-v1_1-small"
clip_encoder = "openai/clip-vit-large-patch14"
autoencoder_path = "torchtitan/experiments/flux/assets/autoencoder/ae.safetensors"
max_t5_encoding_len = 256
[validation]
enable_classifier_free_guidance = false
classifier_free_guidance_scale = 5.0
denoising_steps = 50
eval_freq = 100
save_img_count = 1
save_img_folder = "img"
all_timesteps = false
[inference]
save_img_folder = "inference_results"
prompts_path = "./torchtitan/experiments/flux/inference/prompts.txt"
local_batch_size = 2
img_size = 256
)";

TEST(TorchtitanConfig, CustomConfigModulesKeysAreKnown) {
  std::set<std::string> table;
  for (const TorchtitanKey& k : torchtitan_keys())
    if (k.default_value && !k.module.empty()) table.insert(k.name());
  const std::set<std::string> hand = keys_in(kTorchtitanModuleDefaults);
  for (const std::string& n : hand) EXPECT_TRUE(table.count(n)) << n << " is missing from torchtitan_keys()";
  for (const std::string& n : table) EXPECT_TRUE(hand.count(n)) << n << " is not a key of torchtitan's modules";
  // At their defaults they load and pass, as torchtitan's JobConfig's do.
  JobConfig c;
  ASSERT_NO_THROW(c = load_text(kTorchtitanModuleDefaults)) << required_error_of([&] { load_text(kTorchtitanModuleDefaults); });
  EXPECT_NO_THROW(check_supported(c)) << required_error_of([&] { check_supported(c); });
  // The fault-tolerance module's DiLoCo knobs change nothing without
  // semi_sync_method (torchtitan reads them only with it): any value
  // passes; semi_sync_method itself is refused in one line naming it.
  const JobConfig ft = load_text(
      "[job]\ncustom_config_module = \"torchtitan.components.ft.config\"\n"
      "[fault_tolerance]\nsync_steps = 10\nnum_fragments = 2\nfragment_update_alpha = 0.5\n");
  EXPECT_NO_THROW(check_supported(ft)) << required_error_of([&] { check_supported(ft); });
  const std::string m = required_error_of([] {
    check_supported(load_text("[fault_tolerance]\nenable = true\nsync_steps = 10\nsemi_sync_method = \"diloco\"\n"));
  });
  EXPECT_NE(m.find("[fault_tolerance] semi_sync_method"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  // An experiment's key that would turn its feature on: one line naming it.
  for (const char* text : {"[compile]\nenable = true\npasses = [\"autobucketing_reordering\"]\n",
                           "[hf_transformers]\nmodel = \"Qwen/Qwen3-0.6B\"\n", "[training]\nimg_size = 512\n",
                           "[data]\npatch_size = 14\n", "[experimental]\nautop_force_bf16 = true\n"}) {
    const std::string e = required_error_of([&] { check_supported(load_text(text)); });
    EXPECT_NE(e.find("not supported"), std::string::npos) << text << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(TorchtitanConfig, EveryKeyAtItsDefaultLoadsAndRuns) {
  for (const std::string& text : {std::string(kTorchtitanDefaults), table_defaults_toml()}) {
    JobConfig c;
    ASSERT_NO_THROW(c = load_text(text)) << required_error_of([&] { load_text(text); });
    EXPECT_NO_THROW(check_supported(c)) << required_error_of([&] { check_supported(c); });
    EXPECT_EQ(c.training.batch_size, 8);
    EXPECT_EQ(c.comm.timeout_seconds, 100);  // [comm] train_timeout_seconds
    EXPECT_TRUE(c.checkpoint.model_weights_only);  // last_save_model_only
    EXPECT_EQ(c.activation_checkpoint.mode, "selective");
    EXPECT_TRUE(c.float8.filter_fqns.empty());
    // What titan prints loads back to the same config.
    JobConfig back = load_text(c.to_toml());
    back.job.config_file = c.job.config_file;  // the one difference: where it was read from
    EXPECT_EQ(back.to_toml(), c.to_toml());
  }
}

TEST(TorchtitanConfig, EveryRowHasTheStatusItsTableSays) {
  int counts[4] = {0, 0, 0, 0};
  for (const TorchtitanKey& k : torchtitan_keys()) {
    const Resolved r = resolve(k.section, k.key);
    ASSERT_TRUE(r.field) << k.display();
    if (k.own_status == TorchtitanStatus::Honoured)
      EXPECT_TRUE(r.field->member) << k.display() << " says titan has it, but no titan option resolves";
    else
      EXPECT_FALSE(r.field->member) << k.display() << " is titan's option now: mark its row kTitan";
    ++counts[static_cast<int>(status_of(k))];
  }
  std::printf("torchtitan keys: %zu (honoured %d, alias %d, default only %d, cosmetic %d)\n",
              torchtitan_keys().size(), counts[0], counts[1], counts[2], counts[3]);
}

TEST(TorchtitanConfig, TurningOnAFeatureTitanLacksIsOneLineNamingTheKey) {
  const std::string e = required_error_of([] { check_supported(load_text("[compile]\nenable = true\n")); });
  EXPECT_NE(e.find("not supported"), std::string::npos) << e;
  EXPECT_NE(e.find("[compile] enable = true"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  for (const char* text : {"[fault_tolerance]\nenable = true\n", "[metrics]\nenable_wandb = true\n",
                           "[checkpoint]\nenable = true\ninitial_load_in_hf_quantized = true\n",
                           "[parallelism]\nexpert_parallel_degree = 2\n", "[debug]\nmoe_force_load_balance = true\n",
                           "[job]\ncustom_config_module = \"my_project.config\"\n", "[model]\nconverters = [\"mx\"]\n"}) {
    const std::string m = required_error_of([&] { check_supported(load_text(text)); });
    EXPECT_NE(m.find("not supported"), std::string::npos) << text << ": " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // Every default-only key, from the command line as torchtitan spells it.
  for (const TorchtitanKey& k : torchtitan_keys()) {
    if (status_of(k) != TorchtitanStatus::DefaultOnly) continue;
    std::vector<std::string> args = {"--" + k.name(), other_value_text(k)};
    // A key of a section with an `enable` switch counts only with it on.
    const Field* on = resolve(k.section, "enable").field;
    if (on && on->type == FieldType::Bool && k.key != "enable")
      args.insert(args.end(), {"--" + k.section + ".enable", "true"});
    const JobConfig c = parse_job_config(args);
    const std::string m = required_error_of([&] { check_supported(c); });
    EXPECT_NE(m.find(k.display()), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// A key that only matters while its section's feature is on is accepted
// while it is off, as torchtitan reads it only then; turned on, the same
// key is refused.
TEST(TorchtitanConfig, KeysOfASwitchedOffFeaturePass) {
  for (const char* text : {"[compile]\nenable = false\nbackend = \"eager\"\ncomponents = [\"model\"]\n",
                           "[fault_tolerance]\nenable = false\nreplica_id = 1\ngroup_size = 2\n",
                           "[checkpoint]\nenable = false\ninitial_load_in_hf_quantized = true\n",
                           "[validation]\nenable = false\nfreq = 5\nsteps = 3\n"}) {
    const JobConfig c = load_text(text);
    EXPECT_NO_THROW(check_supported(c)) << text << required_error_of([&] { check_supported(c); });
  }
  const std::string e =
      required_error_of([] { check_supported(load_text("[fault_tolerance]\nenable = true\nreplica_id = 1\n")); });
  EXPECT_NE(e.find("[fault_tolerance] replica_id"), std::string::npos) << e;
  EXPECT_NE(e.find("[fault_tolerance] enable"), std::string::npos) << e;
}

TEST(TorchtitanConfig, CosmeticKeysAndHonouredAlternativesPass) {
  const JobConfig c = load_text(
      "[job]\nprint_config = true\ncustom_config_module = \"torchtitan.components.ft.config\"\n"
      "[metrics]\ndisable_color_printing = true\n[experimental]\ncustom_import = \"my.models\"\n"
      "[training.dataloader]\nnum_workers = 4\npin_memory = true\n[comm]\ntrace_buf_size = 0\n"
      "[quantize.linear.float8]\nrecipe_name = \"tensorwise\"\nemulate = true\n"
      // torchtitan's trainer never reads it (its estimation script does)
      "[memory_estimation]\nenable = true\ndisable_fake_mode = true\n");
  EXPECT_NO_THROW(check_supported(c)) << required_error_of([&] { check_supported(c); });
  EXPECT_EQ(std::get<int64_t>(resolve("training.dataloader", "num_workers").field->get(c)), 4);
  EXPECT_TRUE(c.float8.emulate);
  EXPECT_TRUE(parse_job_config({"--quantize.linear.float8.emulate"}).float8.emulate);
}

TEST(TorchtitanConfig, StringListsFromTomlAndCommandLine) {
  JobConfig c = load_text("[quantize.linear.float8]\nfilter_fqns = [\"output\", \"layers.0.feed_forward.w1\"]\n");
  EXPECT_EQ(c.float8.filter_fqns, (StringList{"output", "layers.0.feed_forward.w1"}));
  c = parse_job_config({"--quantize.linear.float8.filter_fqns", "output,w2", "--compile.components", "model"});
  EXPECT_EQ(c.float8.filter_fqns, (StringList{"output", "w2"}));
  EXPECT_EQ(std::get<StringList>(c.torchtitan_only.at("compile.components")), StringList{"model"});
  EXPECT_TRUE(parse_job_config({"--float8.filter_fqns="}).float8.filter_fqns.empty());
  // Printed as a TOML array, and back.
  EXPECT_NE(c.to_toml().find("filter_fqns = [\"output\", \"w2\"]"), std::string::npos) << c.to_toml();
  EXPECT_EQ(load_text(c.to_toml()).float8.filter_fqns, c.float8.filter_fqns);
  const std::string e = required_error_of([] { load_text("[float8]\nfilter_fqns = [\"a\", 2]\n"); });
  EXPECT_NE(e.find("[float8] filter_fqns"), std::string::npos) << e;
  EXPECT_NE(e.find("list of strings"), std::string::npos) << e;
  EXPECT_NE(required_error_of([] { load_text("[float8]\nfilter_fqns = \"output\"\n"); }).find("list of strings"),
            std::string::npos);
  // torchtitan turns float8 on with a converter.
  EXPECT_TRUE(parse_job_config({"--model.converters", "quantize.linear.float8"}).float8.enable_float8_linear);
  EXPECT_TRUE(load_text("[model]\nconverters = [\"float8\"]\n").float8.enable_float8_linear);
}

// module_fqns_per_model_part, torchtitan's list of lists: a TOML array of
// string arrays, on the command line "a,b;c" or the Python literal a
// torchtitan user writes; printed as TOML and read back.
TEST(TorchtitanConfig, ListsOfListsFromTomlAndCommandLine) {
  const StringLists want = {{"tok_embeddings", "layers.0"}, {"layers.1", "norm", "output"}};
  JobConfig c = load_text("[parallelism]\nmodule_fqns_per_model_part = [[\"tok_embeddings\", \"layers.0\"], "
                          "[\"layers.1\", \"norm\", \"output\"]]\n");
  EXPECT_EQ(c.experimental.module_fqns_per_model_part, want);
  for (const char* text : {"tok_embeddings,layers.0;layers.1,norm,output",
                           "[['tok_embeddings', 'layers.0'], ['layers.1', 'norm', 'output']]",
                           "[[\"tok_embeddings\",\"layers.0\"],[\"layers.1\",\"norm\",\"output\"]]"})
    EXPECT_EQ(parse_job_config({"--parallelism.module_fqns_per_model_part", text}).experimental.module_fqns_per_model_part,
              want)
        << text;
  EXPECT_TRUE(parse_job_config({"--parallelism.module_fqns_per_model_part="}).experimental.module_fqns_per_model_part
                  .empty());
  EXPECT_NE(c.to_toml().find("module_fqns_per_model_part = [[\"tok_embeddings\", \"layers.0\"], [\"layers.1\", "
                             "\"norm\", \"output\"]]"),
            std::string::npos)
      << c.to_toml();
  EXPECT_EQ(load_text(c.to_toml()).experimental.module_fqns_per_model_part, want);
  EXPECT_NE(c.to_json().find("\"module_fqns_per_model_part\": ["), std::string::npos);
  for (const char* bad : {"[parallelism]\nmodule_fqns_per_model_part = [\"layers.0\"]\n",
                          "[parallelism]\nmodule_fqns_per_model_part = [[\"layers.0\", 1]]\n"}) {
    const std::string e = required_error_of([&] { load_text(bad); });
    EXPECT_NE(e.find("module_fqns_per_model_part: expected a list of lists of strings"), std::string::npos) << e;
  }
  const std::string e = required_error_of(
      [] { parse_job_config({"--parallelism.module_fqns_per_model_part", "[['layers.0'], 'norm']"}); });
  EXPECT_NE(e.find("expected a list of lists of strings"), std::string::npos) << e;
}

TEST(TorchtitanConfig, CommandLineSpellingsOfTorchtitanUsers) {
  const JobConfig c = parse_job_config(
      {"--parallelism.data_parallel_shard_degree", "2", "--training.local_batch_size", "4", "--checkpoint.enable",
       "--comm.train_timeout_seconds", "60", "--activation_checkpoint.mode", "selective",
       "--activation_checkpoint.selective_ac_option", "op", "--lr_scheduler.warmup_steps", "5",
       "--lr_scheduler.decay_type", "cosine", "--parallelism.tensor_parallel_degree", "2",
       "--training.dataloader.num_workers", "2", "--debug.seed", "3", "--checkpoint.last_save_model_only", "false"});
  EXPECT_EQ(c.training.data_parallel_shard_degree, 2);
  EXPECT_EQ(c.training.batch_size, 4);
  EXPECT_TRUE(c.checkpoint.enable_checkpoint);
  EXPECT_EQ(c.comm.timeout_seconds, 60);
  EXPECT_EQ(c.activation_checkpoint.selective_ac_option, "op");
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 5);
  EXPECT_EQ(c.lr_scheduler.decay_type, "cosine");
  EXPECT_EQ(c.training.tensor_parallel_degree, 2);
  EXPECT_EQ(c.training.seed, 3);
  EXPECT_FALSE(c.checkpoint.model_weights_only);
  const std::string e = required_error_of([] { parse_job_config({"--training.dataloader.num_worker", "2"}); });
  EXPECT_NE(e.find("num_workers"), std::string::npos) << e;
}

TEST(TorchtitanConfig, UnknownNestedSectionsAndKeysStillFail) {
  EXPECT_NE(required_error_of([] { load_text("[quantize.linear.float9]\nemulate = false\n"); }).find("unknown"),
            std::string::npos);
  EXPECT_NE(required_error_of([] { load_text("[training.dataloader]\nworkers = 1\n"); }).find("num_workers"),
            std::string::npos);
  EXPECT_NE(required_error_of([] { load_text("[quantize]\nfoo = 1\n"); }).find("unknown"), std::string::npos);
}

TEST(TorchtitanConfig, TheRepositorysTrainConfigsLoadAndPassTheGates) {
  for (const char* f : {"train_configs/llama3_8b.toml", "train_configs/llama3_70b.toml",
                        "train_configs/llama3_405b.toml", "train_configs/debug_model.toml"}) {
    JobConfig c;
    ASSERT_NO_THROW(c = load_job_config(source_path(f))) << f;
    EXPECT_NO_THROW(check_supported(c)) << f << ": " << required_error_of([&] { check_supported(c); });
  }
}
