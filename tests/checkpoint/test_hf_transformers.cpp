// titan's HF export and import against the real transformers package
// (tests/reference/hf_llama_check.py): a titan model written with
// write_hf_folder and loaded by LlamaForCausalLM.from_pretrained gives
// titan's logits, and a random model saved by save_pretrained and read by
// read_hf_folder gives transformers' logits in titan. fp32 on the CPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <iostream>

#include "checkpoint/hf_test_util.hpp"
#include "support/run_command.hpp"
#include "titan/checkpoint/hf_folder.hpp"
#include "titan/checkpoint/safetensors.hpp"

#include "titan/checkpoint/dcp.hpp"

using namespace titan::checkpoint;
using titan::models::llama3::ModelArgs;

namespace {

using titan::testing::python;

std::string script() { return python() + " " + titan::testing::source_path("tests/reference/hf_llama_check.py"); }

// transformers is a test-only dependency (scripts/setup.sh installs it); a
// machine without it skips rather than fails.
bool have_transformers() {
  return titan::testing::run_command(python() + " -c 'import transformers'").exit_code == 0;
}

// Tolerance on the max |logits diff| (logits of magnitude ~1-5): both sides
// are fp32 with different kernels (SDPA vs eager softmax, pair vs
// rotate-half RoPE, at::rms_norm vs the written-out one), so only rounding
// differs. Measured (transformers 5.24.0, torch 2.11 CPU): export 7.2e-7
// (GQA + Llama 3.1 scaling) and 2.4e-7 (MQA, plain RoPE) on logits up to
// 3.2; import 3.1e-6 and 2.9e-6 (tiny) and 5.0e-6 (debugmodel shapes, 6
// layers) on logits up to 4.4 (its weights are larger on purpose); through
// `titan convert` both ways 4.1e-6. 2e-5
// leaves 4x headroom over the largest and still catches the subtlest
// mistake tried: a config that drops the RoPE scaling gives 2.0e-4 (over 16
// positions the scaled low frequencies barely turn). An unpermuted wq/wk
// changes the attention scores at order one (test_hf_llama.cpp).
constexpr double kTol = 2e-5;

// Runs the check on an exported folder after `edit` changed its config.json.
titan::testing::CommandResult export_edit_and_check(const ModelArgs& args, const std::string& label,
                                                    const std::string& sed_edit, const std::string& flags = "") {
  auto model = titan::testing::seeded_model(args, 77);
  const std::string dir = titan::testing::scratch_dir("hf_export_" + label);
  write_hf_folder(dir + "/hf", titan::testing::state_of(model), args, at::kFloat);
  if (!sed_edit.empty()) titan::testing::run_command("sed -i '" + sed_edit + "' " + dir + "/hf/config.json");
  torch::manual_seed(5);
  at::Tensor tokens = torch::randint(args.vocab_size, {2, 16}, torch::kLong);
  at::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = model->forward(tokens);
  }
  save_safetensors(dir + "/io.safetensors", {{"tokens", tokens}, {"logits", logits}});
  auto r = titan::testing::run_command(script() + " export-check " + dir + "/hf " + dir + "/io.safetensors --tol " +
                                       std::to_string(kTol) + flags);
  std::cout << "[" << label << "] " << r.output;
  titan::testing::remove_scratch_dir(dir);
  return r;
}

void export_and_check(const ModelArgs& args, const std::string& label) {
  auto r = export_edit_and_check(args, label, "");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

void import_and_check(const std::string& rope, const std::string& shape, bool tied = false) {
  const std::string label = shape + "_" + rope + (tied ? "_tied" : "");
  const std::string dir = titan::testing::scratch_dir("hf_import_" + label);
  auto r = titan::testing::run_command(script() + " make-random " + dir + "/hf " + dir + "/io.safetensors --rope " +
                                       rope + " --shape " + shape + " --seed 3" + (tied ? " --tied" : ""));
  std::cout << "[" << label << "] " << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  HfCheckpoint hf = read_hf_folder(dir + "/hf");
  EXPECT_EQ(hf.args.kv_heads(), shape == "tiny" ? 2 : 16);
  EXPECT_EQ(hf.args.ffn_hidden_dim(), shape == "tiny" ? 160 : 768);
  EXPECT_EQ(hf.args.rope_scaling.enabled, rope == "llama3");
  EXPECT_EQ(hf.args.tie_word_embeddings, tied);
  EXPECT_EQ(hf.titan_state.count("output.weight"), tied ? 0u : 1u);
  titan::models::llama3::Transformer model(hf.args);
  titan::testing::load_state(model, hf.titan_state);
  SafetensorsFile io = load_safetensors(dir + "/io.safetensors");
  at::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = model->forward(io.at("tokens"));
  }
  const double diff = (logits - io.at("logits")).abs().max().item<double>();
  std::cout << "[" << label << "] max |logits diff| transformers vs titan: " << diff << " (logits up to "
            << io.at("logits").abs().max().item<double>() << "), tol " << kTol << "\n";
  EXPECT_LE(diff, kTol);
  titan::testing::remove_scratch_dir(dir);
}

}  // namespace

TEST(HfTransformers, ExportedTitanModelGivesTheSameLogitsInTransformers) {
  if (!have_transformers()) GTEST_SKIP() << "transformers is not importable with " << python() << " (scripts/setup.sh installs it)";
  // GQA (4 query / 2 kv heads) with Llama 3.1 RoPE scaling in all three bands.
  export_and_check(titan::testing::tiny_hf_args(), "gqa_llama3_rope");
  // Plain RoPE (rope_scaling null) at Llama 3's theta, multi-query attention.
  ModelArgs plain = titan::testing::tiny_hf_args();
  plain.rope_scaling.enabled = false;
  plain.rope_theta = 500000.0;
  plain.n_kv_heads = 1;
  export_and_check(plain, "mqa_plain_rope");
}

// The check has teeth: the same weights under a config without the Llama 3.1
// scaling (what a wrong config mapping would write) must fail it.
TEST(HfTransformers, DetectsAConfigThatDiffers) {
  if (!have_transformers()) GTEST_SKIP() << "transformers is not importable with " << python() << " (scripts/setup.sh installs it)";
  auto r = export_edit_and_check(titan::testing::tiny_hf_args(), "wrong_rope",
                                 "s/\"rope_type\": \"llama3\"/\"rope_type\": \"default\"/");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("above tolerance"), std::string::npos) << r.output;
}

// Tied embeddings (Llama 3.2 1B/3B): titan's one table exported without
// lm_head.weight is loaded tied by transformers with titan's logits, and a
// tied save_pretrained model gives transformers' logits in titan.
TEST(HfTransformers, TiedEmbeddingsBothWays) {
  if (!have_transformers()) GTEST_SKIP() << "transformers is not importable with " << python() << " (scripts/setup.sh installs it)";
  ModelArgs tied = titan::testing::tiny_hf_args();
  tied.tie_word_embeddings = true;
  auto r = export_edit_and_check(tied, "tied_export", "", " --expect-tied");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  import_and_check("llama3", "tiny", /*tied=*/true);
}

TEST(HfTransformers, SavePretrainedModelGivesTheSameLogitsInTitan) {
  if (!have_transformers()) GTEST_SKIP() << "transformers is not importable with " << python() << " (scripts/setup.sh installs it)";
  import_and_check("llama3", "tiny");
  import_and_check("default", "tiny");
  // torchtitan's debugmodel shapes: 6 layers, 16 heads, vocab 2048.
  import_and_check("llama3", "debugmodel");
}

// The whole user path: save_pretrained -> `titan convert` -> a titan
// checkpoint -> titan's logits, and back out with `titan convert` ->
// from_pretrained -> transformers' logits.
TEST(HfTransformers, TitanConvertBothWaysKeepsTheLogits) {
  if (!have_transformers()) GTEST_SKIP() << "transformers is not importable with " << python() << " (scripts/setup.sh installs it)";
  const std::string dir = titan::testing::scratch_dir("hf_convert_cli");
  auto r = titan::testing::run_command(script() + " make-random " + dir + "/hf " + dir +
                                       "/io.safetensors --shape debugmodel --seed 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string titan_bin = titan::testing::bin_path("titan");
  r = titan::testing::run_command(titan_bin + " convert --checkpoint_path " + dir + "/hf --output_path " + dir +
                                  "/step-0 --model_type llama3 --model_flavor debugmodel 2>&1");
  std::cout << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;

  ModelArgs args = titan::models::llama3::flavor_args("debugmodel");
  titan::models::llama3::Transformer model(args);
  titan::testing::load_state(model, read_model_tensors(dir + "/step-0"));
  SafetensorsFile io = load_safetensors(dir + "/io.safetensors");
  at::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = model->forward(io.at("tokens"));
  }
  const double diff = (logits - io.at("logits")).abs().max().item<double>();
  std::cout << "[convert hf->titan] max |logits diff| transformers vs titan: " << diff << ", tol " << kTol << "\n";
  EXPECT_LE(diff, kTol);

  r = titan::testing::run_command(titan_bin + " convert --checkpoint_path " + dir + "/step-0 --output_path " + dir +
                                  "/hf_back --model_flavor debugmodel 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = titan::testing::run_command(script() + " export-check " + dir + "/hf_back " + dir + "/io.safetensors --tol " +
                                  std::to_string(kTol));
  std::cout << "[convert titan->hf] " << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  titan::testing::remove_scratch_dir(dir);
}
