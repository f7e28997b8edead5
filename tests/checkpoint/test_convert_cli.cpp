// `titan convert` as a user runs it: titan checkpoint -> HF folder -> titan
// checkpoint is bitwise, the export dtype applies, and every kind of bad
// input is one line and exit 1.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/hf_test_util.hpp"
#include "support/run_command.hpp"
#include "titan/checkpoint/hf_folder.hpp"
#include "titan/checkpoint/torchtitan_v03.hpp"
#include "titan/models/llama3/model_args.hpp"

#include "titan/checkpoint/dcp.hpp"
#include "titan/util/files.hpp"

using namespace titan::checkpoint;
using titan::testing::bin_path;
using titan::testing::run_command;

namespace {

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "missing: " << (part) << "\n" << (text)

struct Scratch {
  std::string dir = titan::testing::scratch_dir("convert_cli");
  ~Scratch() { titan::testing::remove_scratch_dir(dir); }
};

// torchtitan's debug flavor, seeded: the smallest real flavor (6.3M parameters).
StateDict debug_state() {
  auto model = titan::testing::seeded_model(titan::models::llama3::flavor_args("debugmodel"), 31);
  StateDict s;
  for (auto& [name, t] : titan::testing::state_of(model)) s[name] = t.clone();
  return s;
}

std::string convert(const std::string& args) { return bin_path("titan") + " convert " + args + " 2>&1"; }

// One line "error: ..." and exit 1.
void expect_one_line_error(const titan::testing::CommandResult& r, const std::string& want) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output, "error: ");
  EXPECT_HAS(r.output, want);
  std::string trimmed = r.output;
  while (!trimmed.empty() && trimmed.back() == '\n') trimmed.pop_back();
  EXPECT_EQ(trimmed.find('\n'), std::string::npos) << "not one line:\n" << r.output;
}

}  // namespace

TEST(ConvertCli, HelpListsTheOptions) {
  auto r = run_command(convert("--help"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* want : {"--checkpoint_path", "--output_path", "--model_type", "--model_flavor", "--export_dtype"})
    EXPECT_HAS(r.output, want);
}

TEST(ConvertCli, BadOptionsAreOneLineErrors) {
  Scratch s;
  const std::string io = "--checkpoint_path " + s.dir + "/in --output_path " + s.dir + "/out";
  expect_one_line_error(run_command(convert(io)), "missing --model_flavor");
  expect_one_line_error(run_command(convert("--model_flavor 8B --output_path x")), "missing --checkpoint_path");
  expect_one_line_error(run_command(convert(io + " --model_flavor 8B --bogus 1")), "unknown option '--bogus'");
  expect_one_line_error(run_command(convert(io + " --model_flavor 8B --model_type gpt2")), "--model_type 'gpt2'");
  expect_one_line_error(run_command(convert(io + " --model_flavor 9B")), "unknown llama3 flavor '9B'");
  expect_one_line_error(run_command(convert(io + " --model_flavor 8B --export_dtype int8")), "unknown dtype 'int8'");
  expect_one_line_error(run_command(convert(io + " --model_flavor 8B --output_path")), "--output_path needs a value");
}

// An HF folder whose shapes are not the flavor's: named, with the tensor.
TEST(ConvertCli, FlavorThatDoesNotMatchTheHfFolderIsRefused) {
  Scratch s;
  auto args = titan::models::llama3::flavor_args("debugmodel");
  write_hf_folder(s.dir + "/hf", debug_state(), args, at::kFloat);
  auto r = run_command(convert("--checkpoint_path " + s.dir + "/hf --output_path " + s.dir + "/out --model_flavor 1B"));
  expect_one_line_error(r, "--model_flavor 1B does not match the checkpoint");
  EXPECT_HAS(r.output, "tok_embeddings.weight' has shape [2048, 256]");
}

TEST(ConvertCli, TitanToHfToTitanIsBitwise) {
  Scratch s;
  const StateDict state = debug_state();
  write_model_checkpoint(s.dir + "/step-10", state, 10);
  auto r = run_command(convert("--checkpoint_path " + s.dir + "/step-10 --output_path " + s.dir +
                               "/hf --model_type llama3 --model_flavor debugmodel"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "-> HF folder");
  HfCheckpoint hf = read_hf_folder(s.dir + "/hf");
  titan::testing::expect_bitwise_equal(hf.titan_state, state);

  r = run_command(convert("--checkpoint_path " + s.dir + "/hf --output_path " + s.dir +
                          "/step-0 --model_flavor debugmodel"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "-> titan checkpoint");
  titan::testing::expect_bitwise_equal(read_model_tensors(s.dir + "/step-0"), state);
}

// torchtitan 0.3's names both ways: a titan checkpoint renamed (lm_head,
// qkv_linear, fused or not) and read back as titan's is bitwise the same;
// HF -> 0.3 names directly; a 0.3-named checkpoint exports to HF.
TEST(ConvertCli, TorchtitanV03NamingRoundTripIsBitwise) {
  Scratch s;
  const StateDict state = debug_state();
  write_model_checkpoint(s.dir + "/step-5", state, 5);
  for (const std::string fuse : {"", " --fuse_qkv"}) {
    SCOPED_TRACE(fuse);
    const std::string out = s.dir + (fuse.empty() ? "/split" : "/fused");  // each conversion a new folder
    auto r = run_command(convert("--checkpoint_path " + s.dir + "/step-5 --output_path " + out +
                                 "/v03 --model_flavor debugmodel --output_format checkpoint --naming torchtitan-0.3" +
                                 fuse));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_HAS(r.output, "torchtitan-0.3 names");
    const StateDict v03 = read_model_tensors(out + "/v03");
    EXPECT_EQ(v03.count("lm_head.weight"), 1u);
    EXPECT_EQ(v03.count("output.weight"), 0u);
    EXPECT_EQ(v03.count("layers.5.attention.qkv_linear.wqkv.weight"), fuse.empty() ? 0u : 1u);
    EXPECT_EQ(v03.count("layers.5.attention.qkv_linear.wq.weight"), fuse.empty() ? 1u : 0u);
    r = run_command(convert("--checkpoint_path " + out + "/v03 --output_path " + out +
                            "/back --model_flavor debugmodel --output_format checkpoint"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    titan::testing::expect_bitwise_equal(read_model_tensors(out + "/back"), state);
    r = run_command(convert("--checkpoint_path " + out + "/v03 --output_path " + out +
                            "/hf --model_flavor debugmodel"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    titan::testing::expect_bitwise_equal(read_hf_folder(out + "/hf").titan_state, state);
  }
  auto r = run_command(convert("--checkpoint_path " + s.dir + "/fused/hf --output_path " + s.dir +
                               "/v03_from_hf --model_flavor debugmodel --naming torchtitan-0.3"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  titan::testing::expect_bitwise_equal(read_model_tensors(s.dir + "/v03_from_hf"),
                                       to_torchtitan_v03(state, titan::models::llama3::flavor_args("debugmodel"),
                                                         /*fused=*/false));
  const std::string io =
      "--checkpoint_path " + s.dir + "/step-5 --output_path " + s.dir + "/x --model_flavor debugmodel";
  expect_one_line_error(run_command(convert(io + " --naming torchtitan-0.3")), "add --output_format checkpoint");
  expect_one_line_error(run_command(convert(io + " --fuse_qkv")), "--fuse_qkv needs --naming torchtitan-0.3");
  expect_one_line_error(run_command(convert(io + " --naming hf")), "--naming 'hf'");
}

// A tied HF folder (as Llama 3.2 1B and 3B are saved) into an untied
// flavor: the output starts as a copy of the embedding, read from the
// folder again when its turn comes.
TEST(ConvertCli, TiedFolderIntoAnUntiedFlavorCopiesTheEmbedding) {
  Scratch s;
  auto tied = titan::models::llama3::flavor_args("debugmodel");
  tied.tie_word_embeddings = true;
  StateDict state = debug_state();
  state.erase("output.weight");
  write_hf_folder(s.dir + "/hf", state, tied, at::kFloat);
  auto r = run_command(convert("--checkpoint_path " + s.dir + "/hf --output_path " + s.dir +
                               "/step-0 --model_flavor debugmodel --export_dtype bfloat16"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "tied embeddings untied for this flavor (output.weight copied from the embedding)");
  state["output.weight"] = state.at("tok_embeddings.weight");
  StateDict want;
  for (const auto& [name, t] : state) want[name] = t.to(at::kBFloat16);
  titan::testing::expect_bitwise_equal(read_model_tensors(s.dir + "/step-0"), want);
}

// A conversion never replaces a saved model: an output folder that holds
// anything is refused before anything is read or written, and what it
// held is intact; an empty folder made for the output is used.
TEST(ConvertCli, AnOutputThatExistsIsRefusedAndKept) {
  Scratch s;
  const StateDict state = debug_state();
  write_model_checkpoint(s.dir + "/step-3", state, 3);
  auto r = run_command(convert("--checkpoint_path " + s.dir + "/step-3 --output_path " + s.dir + "/hf --model_flavor "
                               "debugmodel --export_dtype bfloat16"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_one_line_error(run_command(convert("--checkpoint_path " + s.dir + "/hf --output_path " + s.dir +
                                            "/step-3 --model_flavor debugmodel")),
                        "--output_path " + s.dir + "/step-3 already exists and is not empty");
  titan::testing::expect_bitwise_equal(read_model_tensors(s.dir + "/step-3"), state);  // not the bf16 values
  expect_one_line_error(run_command(convert("--checkpoint_path " + s.dir + "/step-3 --output_path " + s.dir +
                                            "/hf --model_flavor debugmodel")),
                        "does not replace a saved model");
  EXPECT_TRUE(read_hf_folder(s.dir + "/hf").titan_state.at("tok_embeddings.weight").scalar_type() == at::kBFloat16);
  ASSERT_TRUE(titan::files::make_directories(s.dir + "/empty"));
  r = run_command(convert("--checkpoint_path " + s.dir + "/step-3 --output_path " + s.dir +
                          "/empty --model_flavor debugmodel"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(ConvertCli, ExportDtypeAndFlavorMismatch) {
  Scratch s;
  const StateDict state = debug_state();
  write_model_checkpoint(s.dir + "/step-1", state, 1);
  auto r = run_command(convert("--checkpoint_path " + s.dir + "/step-1 --output_path " + s.dir +
                               "/hf --model_flavor debugmodel --export_dtype bfloat16"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const auto& [name, t] : read_hf_folder(s.dir + "/hf").titan_state)
    EXPECT_TRUE(t.equal(state.at(name).to(at::kBFloat16))) << name;

  r = run_command(convert("--checkpoint_path " + s.dir + "/step-1 --output_path " + s.dir + "/hf8 --model_flavor 8B"));
  expect_one_line_error(r, "--model_flavor 8B does not match the checkpoint");
}

// The user path: a checkpoint the trainer saved under FSDP (2 ranks, with
// optimizer state) exports to HF with the trained weights, and the HF
// folder imported as <dump>/checkpoint/step-0 is where a new run starts.
TEST(ConvertCli, TrainerCheckpointExportsAndAnImportSeedsTraining) {
  Scratch s;
  auto train = [&](const std::string& dump, const std::string& extra) {
    return run_command(bin_path("titan") + " train --job.config_file " +
                       titan::testing::source_path("train_configs/debug_model.toml") + " --job.dump_folder " + dump +
                       " --training.device cpu --training.seq_len 16 --training.batch_size 2"
                       " --training.mixed_precision_param float32 --metrics.log_freq 1"
                       " --checkpoint.enable_checkpoint " + extra + " 2>&1");
  };
  auto r = train(s.dir + "/job", "--training.steps 2 --checkpoint.interval 2 --nproc 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string step2 = s.dir + "/job/checkpoint/step-2";
  r = run_command(convert("--checkpoint_path " + step2 + " --output_path " + s.dir + "/hf --model_flavor debugmodel"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  titan::testing::expect_bitwise_equal(read_hf_folder(s.dir + "/hf").titan_state, read_model_tensors(step2));

  r = run_command(convert("--checkpoint_path " + s.dir + "/hf --output_path " + s.dir +
                          "/job2/checkpoint/step-0 --model_flavor debugmodel"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = train(s.dir + "/job2", "--training.steps 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "checkpoint: loaded the weights of " + s.dir + "/job2/checkpoint/step-0");
}
