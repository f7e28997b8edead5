#include "titan/checkpoint/hf_config.hpp"

#include <nlohmann/json.hpp>

#include <cmath>

#include "titan/util/error.hpp"

namespace titan::checkpoint {

namespace {

using nlohmann::json;
using models::llama3::ModelArgs;

// Reads a key that must be there and be a number; the error names the key.
double number(const json& j, const std::string& key, const std::string& what) {
  TITAN_CHECK(j.contains(key) && !j.at(key).is_null(), what, ": missing key '", key, "'");
  TITAN_CHECK(j.at(key).is_number(), what, ": key '", key, "' must be a number, got ", j.at(key).dump());
  return j.at(key).get<double>();
}

int64_t integer(const json& j, const std::string& key, const std::string& what) {
  TITAN_CHECK(j.contains(key) && !j.at(key).is_null(), what, ": missing key '", key, "'");
  TITAN_CHECK(j.at(key).is_number_integer(), what, ": key '", key, "' must be an integer, got ",
              j.at(key).dump());
  return j.at(key).get<int64_t>();
}

bool present(const json& j, const std::string& key) { return j.contains(key) && !j.at(key).is_null(); }

// A key titan has no place for: only its "harmless" value is accepted.
void require_value(const json& j, const std::string& key, const json& allowed, const std::string& what,
                   const std::string& why) {
  if (!present(j, key)) return;
  TITAN_CHECK(j.at(key) == allowed, what, ": key '", key, "' is ", j.at(key).dump(), " but titan's Llama 3 ",
              why, " (needs ", allowed.dump(), ")");
}

// RoPE from either the transformers 4 layout (rope_theta + rope_scaling) or
// the transformers 5 one (rope_parameters holding rope_theta too).
void read_rope(const json& j, ModelArgs& a, const std::string& what) {
  std::string key = "rope_scaling";
  json params = present(j, key) ? j.at(key) : json(nullptr);
  if (present(j, "rope_parameters")) {
    key = "rope_parameters";
    params = j.at(key);
  }
  a.rope_theta = present(j, "rope_theta") ? number(j, "rope_theta", what) : 10000.0;  // HF's default
  a.rope_scaling.enabled = false;
  if (params.is_null()) return;
  TITAN_CHECK(params.is_object(), what, ": key '", key, "' must be an object, got ", params.dump());
  const std::string sub = key + ".";
  if (present(params, "rope_theta")) a.rope_theta = number(params, "rope_theta", what + " " + key);
  // Older configs spell it "type".
  std::string type = "default";
  for (const char* k : {"rope_type", "type"})
    if (present(params, k)) {
      TITAN_CHECK(params.at(k).is_string(), what, ": key '", sub, k, "' must be a string");
      type = params.at(k).get<std::string>();
      break;
    }
  if (type == "default") return;
  TITAN_CHECK(type == "llama3", what, ": key '", sub, "rope_type' is \"", type,
              "\" but titan implements only plain RoPE (\"default\") and Llama 3.1's \"llama3\" scaling");
  const std::string w = what + " " + key;
  a.rope_scaling.enabled = true;
  a.rope_scaling.factor = number(params, "factor", w);
  a.rope_scaling.low_freq_factor = number(params, "low_freq_factor", w);
  a.rope_scaling.high_freq_factor = number(params, "high_freq_factor", w);
  a.rope_scaling.original_max_position = integer(params, "original_max_position_embeddings", w);
}

// titan stores the FFN width as Meta's recipe (multiple_of, multiplier), HF
// as the number (models::llama3::set_ffn_hidden_dim picks the recipe).
void read_ffn(int64_t intermediate, ModelArgs& a, const std::string& what) {
  TITAN_CHECK(intermediate > 0, what, ": key 'intermediate_size' must be positive, got ", intermediate);
  TITAN_CHECK(models::llama3::set_ffn_hidden_dim(a, intermediate), what, ": key 'intermediate_size' ", intermediate,
              " cannot be expressed as titan's FFN width for hidden_size ", a.dim);
}

}  // namespace

std::string hf_dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "float32";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    default: throw Error("hf: dtype " + std::string(c10::toString(dtype)) +
                         " is not an export dtype (float32, bfloat16 or float16)");
  }
}

at::ScalarType parse_hf_dtype(const std::string& name) {
  if (name == "float32" || name == "fp32") return at::kFloat;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  if (name == "float16" || name == "fp16") return at::kHalf;
  throw Error("hf: unknown dtype '" + name + "' (valid: float32, bfloat16, float16)");
}

std::string hf_config_json(const ModelArgs& a, at::ScalarType dtype) {
  a.validate();
  json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", a.dim},
      {"intermediate_size", a.ffn_hidden_dim()},
      {"num_attention_heads", a.n_heads},
      {"num_key_value_heads", a.kv_heads()},
      {"num_hidden_layers", a.n_layers},
      {"head_dim", a.head_dim()},
      {"vocab_size", a.vocab_size},
      {"rms_norm_eps", a.norm_eps},
      {"rope_theta", a.rope_theta},
      {"max_position_embeddings", a.max_seq_len},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"tie_word_embeddings", a.tie_word_embeddings},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"torch_dtype", hf_dtype_name(dtype)},
  };
  if (a.rope_scaling.enabled) {
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", a.rope_scaling.factor},
        {"low_freq_factor", a.rope_scaling.low_freq_factor},
        {"high_freq_factor", a.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", a.rope_scaling.original_max_position},
    };
  } else {
    j["rope_scaling"] = nullptr;
  }
  return j.dump(2) + "\n";
}

HfLlamaConfig parse_hf_config(const std::string& text, const std::string& what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    throw Error(what + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  TITAN_CHECK(j.is_object(), what, ": not a JSON object");
  if (present(j, "model_type"))
    TITAN_CHECK(j.at("model_type") == "llama", what, ": key 'model_type' is ", j.at("model_type").dump(),
                ", not \"llama\"");
  if (present(j, "architectures")) {
    const json& arch = j.at("architectures");
    TITAN_CHECK(arch.is_array() && arch.size() == 1 && arch[0] == "LlamaForCausalLM", what,
                ": key 'architectures' is ", arch.dump(), ", not [\"LlamaForCausalLM\"]");
  }
  require_value(j, "attention_bias", false, what, "has no attention biases");
  require_value(j, "mlp_bias", false, what, "has no MLP biases");
  require_value(j, "hidden_act", "silu", what, "uses SwiGLU");

  HfLlamaConfig c;
  ModelArgs& a = c.args;
  a.dim = integer(j, "hidden_size", what);
  a.n_layers = integer(j, "num_hidden_layers", what);
  a.n_heads = integer(j, "num_attention_heads", what);
  if (present(j, "num_key_value_heads")) a.n_kv_heads = integer(j, "num_key_value_heads", what);
  a.vocab_size = integer(j, "vocab_size", what);
  TITAN_CHECK(a.n_heads > 0 && a.dim % a.n_heads == 0, what, ": key 'hidden_size' ", a.dim,
              " is not divisible by num_attention_heads ", a.n_heads);
  if (present(j, "head_dim"))
    TITAN_CHECK(integer(j, "head_dim", what) == a.dim / a.n_heads, what, ": key 'head_dim' is ",
                j.at("head_dim").dump(), " but titan's Llama 3 needs hidden_size / num_attention_heads = ",
                a.dim / a.n_heads);
  read_ffn(integer(j, "intermediate_size", what), a, what);
  a.norm_eps = present(j, "rms_norm_eps") ? number(j, "rms_norm_eps", what) : 1e-6;  // HF's default
  a.max_seq_len = present(j, "max_position_embeddings") ? integer(j, "max_position_embeddings", what) : 2048;
  read_rope(j, a, what);
  if (present(j, "tie_word_embeddings")) {
    TITAN_CHECK(j.at("tie_word_embeddings").is_boolean(), what, ": key 'tie_word_embeddings' must be a boolean");
    c.tie_word_embeddings = j.at("tie_word_embeddings").get<bool>();
  }  // absent: LlamaConfig's default, untied
  a.tie_word_embeddings = c.tie_word_embeddings;
  for (const char* k : {"torch_dtype", "dtype"})
    if (present(j, k) && j.at(k).is_string()) {
      // Informational only (the tensors carry their own dtype), so an
      // unusual one such as float64 is not an error.
      const std::string name = j.at(k).get<std::string>();
      if (name == "float32" || name == "bfloat16" || name == "float16") c.dtype = parse_hf_dtype(name);
      break;
    }
  try {
    a.validate();
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
  return c;
}

ModelArgs model_args_from_hf_config(const std::string& json_text, const std::string& what) {
  return parse_hf_config(json_text, what).args;
}

}  // namespace titan::checkpoint
