// config.json for LlamaForCausalLM: titan's args round trip through it, the
// flavors come back as themselves, both transformers layouts parse, and
// what titan cannot represent is refused with the key's name.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "checkpoint/hf_test_util.hpp"
#include "titan/checkpoint/hf_config.hpp"
#include "titan/util/error.hpp"

using namespace titan::checkpoint;
using titan::models::llama3::ModelArgs;
using nlohmann::json;

namespace {

// Every field that changes the model's math or shapes.
void expect_same_model(const ModelArgs& a, const ModelArgs& b) {
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.kv_heads(), b.kv_heads());
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.ffn_hidden_dim(), b.ffn_hidden_dim());
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.rope_scaling.enabled, b.rope_scaling.enabled);
  if (a.rope_scaling.enabled && b.rope_scaling.enabled) {
    EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
    EXPECT_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
    EXPECT_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
    EXPECT_EQ(a.rope_scaling.original_max_position, b.rope_scaling.original_max_position);
  }
}

std::string config_error(const std::string& text) {
  try {
    parse_hf_config(text);
  } catch (const titan::Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string with(const ModelArgs& a, const std::string& key, const json& value) {
  json j = json::parse(hf_config_json(a, at::kFloat));
  if (value.is_discarded()) j.erase(key);
  else j[key] = value;
  return j.dump();
}

}  // namespace

TEST(HfConfig, WritesLlamaForCausalLMKeys) {
  ModelArgs a = titan::models::llama3::flavor_args("8B");
  json j = json::parse(hf_config_json(a, at::kBFloat16));
  EXPECT_EQ(j["architectures"], json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(j["hidden_size"], 4096);
  EXPECT_EQ(j["intermediate_size"], 14336);
  EXPECT_EQ(j["num_attention_heads"], 32);
  EXPECT_EQ(j["num_key_value_heads"], 8);
  EXPECT_EQ(j["num_hidden_layers"], 32);
  EXPECT_EQ(j["head_dim"], 128);
  EXPECT_EQ(j["vocab_size"], 128256);
  EXPECT_EQ(j["rms_norm_eps"], 1e-5);
  EXPECT_EQ(j["rope_theta"], 500000.0);
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(j["rope_scaling"]["factor"], 8.0);
  EXPECT_EQ(j["rope_scaling"]["original_max_position_embeddings"], 8192);
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(j["torch_dtype"], "bfloat16");
  EXPECT_EQ(j["hidden_act"], "silu");
  EXPECT_EQ(j["attention_bias"], false);
  EXPECT_EQ(j["mlp_bias"], false);
}

TEST(HfConfig, RoundTripsTinyArgsAndEveryFlavor) {
  ModelArgs tiny = titan::testing::tiny_hf_args();
  expect_same_model(model_args_from_hf_config(hf_config_json(tiny, at::kFloat)), tiny);
  ModelArgs plain = tiny;
  plain.rope_scaling.enabled = false;
  plain.n_kv_heads.reset();
  expect_same_model(model_args_from_hf_config(hf_config_json(plain, at::kFloat)), plain);
  EXPECT_TRUE(json::parse(hf_config_json(plain, at::kFloat))["rope_scaling"].is_null());
  for (const auto& name : titan::models::llama3::flavor_names()) {
    SCOPED_TRACE(name);
    ModelArgs f = titan::models::llama3::flavor_args(name);
    HfLlamaConfig c = parse_hf_config(hf_config_json(f, at::kHalf));
    expect_same_model(c.args, f);
    // A flavor's FFN recipe comes back as the flavor's, not just its width.
    EXPECT_EQ(c.args.multiple_of, f.multiple_of);
    EXPECT_EQ(c.args.ffn_dim_multiplier, f.ffn_dim_multiplier);
    EXPECT_EQ(c.tie_word_embeddings, f.tie_word_embeddings);  // 1B and 3B are tied, as Meta's
    EXPECT_EQ(c.args.tie_word_embeddings, f.tie_word_embeddings);
    EXPECT_EQ(c.dtype, at::kHalf);
  }
}

// Meta's published configs (keys as on the Hugging Face Hub) read as titan's
// flavors: Llama 3.1 8B, and Llama 3.2 1B with its tied embeddings.
TEST(HfConfig, ReadsMetaLlamaConfigsAsTheFlavors) {
  const std::string llama31_8b = R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";
  HfLlamaConfig c = parse_hf_config(llama31_8b);
  ModelArgs want = titan::models::llama3::flavor_args("8B");
  want.max_seq_len = 131072;
  expect_same_model(c.args, want);
  EXPECT_EQ(c.args.multiple_of, 1024);
  EXPECT_EQ(c.args.ffn_dim_multiplier, 1.3);
  EXPECT_EQ(c.dtype, at::kBFloat16);
  EXPECT_FALSE(c.tie_word_embeddings);

  const std::string llama32_1b = R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 128256})";
  c = parse_hf_config(llama32_1b);
  want = titan::models::llama3::flavor_args("1B");
  want.max_seq_len = 131072;
  expect_same_model(c.args, want);
  EXPECT_TRUE(c.tie_word_embeddings);
}

// An intermediate_size no flavor has (what a small HF test model uses).
TEST(HfConfig, AnyIntermediateSizeIsReproduced) {
  ModelArgs a = titan::testing::tiny_hf_args();
  for (int64_t width : {1, 37, 128, 170, 171, 256, 1000}) {
    ModelArgs b = model_args_from_hf_config(with(a, "intermediate_size", width));
    EXPECT_EQ(b.ffn_hidden_dim(), width);
  }
}

// transformers 5 writes rope_parameters (with rope_theta inside) and dtype.
TEST(HfConfig, ReadsTransformers5Layout) {
  ModelArgs a = titan::testing::tiny_hf_args();
  json j = json::parse(hf_config_json(a, at::kFloat));
  j.erase("rope_theta");
  j.erase("torch_dtype");
  j["dtype"] = "bfloat16";
  j["rope_parameters"] = j["rope_scaling"];
  j["rope_parameters"]["rope_theta"] = a.rope_theta;
  j.erase("rope_scaling");
  HfLlamaConfig c = parse_hf_config(j.dump());
  expect_same_model(c.args, a);
  EXPECT_EQ(c.dtype, at::kBFloat16);
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 123.0}};
  c = parse_hf_config(j.dump());
  EXPECT_FALSE(c.args.rope_scaling.enabled);
  EXPECT_EQ(c.args.rope_theta, 123.0);
}

TEST(HfConfig, RefusesWhatTitanCannotRepresentNamingTheKey) {
  ModelArgs a = titan::testing::tiny_hf_args();
  const json discard = json(json::value_t::discarded);
  const std::pair<std::string, std::string> cases[] = {
      {with(a, "attention_bias", true), "'attention_bias'"},
      {with(a, "mlp_bias", true), "'mlp_bias'"},
      {with(a, "hidden_act", "gelu"), "'hidden_act'"},
      {with(a, "head_dim", 32), "'head_dim'"},
      {with(a, "model_type", "mistral"), "'model_type'"},
      {with(a, "architectures", json::array({"MistralForCausalLM"})), "'architectures'"},
      {with(a, "rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}), "'rope_scaling.rope_type'"},
      {with(a, "rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}), "'low_freq_factor'"},
      {with(a, "hidden_size", discard), "missing key 'hidden_size'"},
      {with(a, "num_hidden_layers", "two"), "'num_hidden_layers' must be an integer"},
      {with(a, "num_key_value_heads", 3), "n_kv_heads"},
      {"{not json", "not valid JSON"},
  };
  for (const auto& [text, want] : cases) {
    const std::string m = config_error(text);
    EXPECT_NE(m.find(want), std::string::npos) << "want " << want << " in: " << m;
    EXPECT_NE(m.find("config.json"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(HfConfig, DtypeNames) {
  EXPECT_EQ(parse_hf_dtype("bfloat16"), at::kBFloat16);
  EXPECT_EQ(parse_hf_dtype("float16"), at::kHalf);
  EXPECT_EQ(parse_hf_dtype("float32"), at::kFloat);
  EXPECT_THROW(parse_hf_dtype("int8"), titan::Error);
  EXPECT_THROW(hf_dtype_name(at::kDouble), titan::Error);
}
