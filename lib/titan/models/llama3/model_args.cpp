#include "titan/models/llama3/model_args.hpp"

#include <nlohmann/json.hpp>

#include <map>
#include <sstream>

#include "titan/config/job_config.hpp"
#include "titan/util/error.hpp"

namespace titan::models::llama3 {

int64_t ffn_hidden_dim(int64_t dim, int64_t multiple_of, std::optional<double> ffn_dim_multiplier) {
  int64_t hidden = 4 * dim;
  hidden = (2 * hidden) / 3;  // int(2 * hidden / 3) in Python: floor for positives
  if (ffn_dim_multiplier) hidden = static_cast<int64_t>(*ffn_dim_multiplier * static_cast<double>(hidden));
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

bool set_ffn_hidden_dim(ModelArgs& a, int64_t width) {
  if (width <= 0) return false;
  for (const auto& name : flavor_names()) {
    const ModelArgs f = flavor_args(name);
    if (f.dim == a.dim && f.ffn_hidden_dim() == width) {
      a.multiple_of = f.multiple_of, a.ffn_dim_multiplier = f.ffn_dim_multiplier;
      return true;
    }
  }
  a.multiple_of = 256, a.ffn_dim_multiplier.reset();
  if (a.ffn_hidden_dim() == width) return true;
  // Round up to a multiple of the width itself: any pre-rounding width in
  // (0, width] lands on it, and multiplier·⌊8·dim/3⌋ is within one of it.
  const int64_t base = 8 * a.dim / 3;
  a.multiple_of = width;
  a.ffn_dim_multiplier = static_cast<double>(width) / static_cast<double>(base);
  return a.ffn_hidden_dim() == width;
}

int64_t ModelArgs::ffn_hidden_dim() const {
  return llama3::ffn_hidden_dim(dim, multiple_of, ffn_dim_multiplier);
}

void ModelArgs::validate() const {
  TITAN_CHECK(dim > 0 && n_layers > 0 && n_heads > 0 && vocab_size > 0 && multiple_of > 0,
              "model: dim, n_layers, n_heads, vocab_size and multiple_of must be positive");
  TITAN_CHECK(dim % n_heads == 0, "model: dim ", dim, " is not divisible by n_heads ", n_heads);
  TITAN_CHECK(head_dim() % 2 == 0, "model: head_dim ", head_dim(), " must be even for RoPE");
  TITAN_CHECK(kv_heads() > 0 && n_heads % kv_heads() == 0, "model: n_heads ", n_heads,
              " is not divisible by n_kv_heads ", kv_heads());
  TITAN_CHECK(max_seq_len > 0, "model: max_seq_len must be positive, got ", max_seq_len);
  TITAN_CHECK(norm_eps > 0, "model: norm_eps must be positive, got ", norm_eps);
  TITAN_CHECK(attn_type == "sdpa" || attn_type == "flash" || attn_type == "math", "model: attn_type '", attn_type,
              "' is not one of sdpa, flash, math");
  TITAN_CHECK(attn_mask_type == "causal" || attn_mask_type == "block_causal", "model: attn_mask_type '",
              attn_mask_type, "' is not one of causal, block_causal");
}

std::string to_json(const ModelArgs& a) {
  nlohmann::json j = {
      {"dim", a.dim},
      {"n_layers", a.n_layers},
      {"n_heads", a.n_heads},
      {"n_kv_heads", a.n_kv_heads ? nlohmann::json(*a.n_kv_heads) : nlohmann::json(nullptr)},
      {"vocab_size", a.vocab_size},
      {"multiple_of", a.multiple_of},
      {"ffn_dim_multiplier",
       a.ffn_dim_multiplier ? nlohmann::json(*a.ffn_dim_multiplier) : nlohmann::json(nullptr)},
      {"norm_eps", a.norm_eps},
      {"rope_theta", a.rope_theta},
      {"rope_scaling",
       {{"enabled", a.rope_scaling.enabled},
        {"factor", a.rope_scaling.factor},
        {"low_freq_factor", a.rope_scaling.low_freq_factor},
        {"high_freq_factor", a.rope_scaling.high_freq_factor},
        {"original_max_position", a.rope_scaling.original_max_position}}},
      {"max_seq_len", a.max_seq_len},
      {"depth_init", a.depth_init},
      {"tie_word_embeddings", a.tie_word_embeddings},
  };
  return j.dump();
}

const std::vector<std::string>& flavor_names() {
  static const std::vector<std::string> names = {"debugmodel", "debugmodel_flex_attn", "debugmodel_varlen_attn",
                                                 "1B", "3B", "8B", "8B_flex", "8B_varlen", "70B", "405B"};
  return names;
}

ModelArgs flavor_args(const std::string& flavor) {
  // torchtitan 0.2's *_flex_attn / *_flex / *_varlen flavors are their base
  // model with block-causal (document) attention, which torchtitan computes
  // with FlexAttention or varlen kernels; titan computes the same mask with
  // the backend [model] attn_type names (ops/attention/document_mask.hpp).
  static const std::map<std::string, std::string> block_causal_variants = {
      {"debugmodel_flex_attn", "debugmodel"}, {"debugmodel_varlen_attn", "debugmodel"},
      {"8B_flex", "8B"}, {"8B_varlen", "8B"}};
  if (auto it = block_causal_variants.find(flavor); it != block_causal_variants.end()) {
    ModelArgs a = flavor_args(it->second);
    a.attn_mask_type = "block_causal";
    return a;
  }
  ModelArgs a;  // defaults: vocab 128256, rope_theta 500000, norm_eps 1e-5, Llama 3.1 scaling
  if (flavor == "debugmodel") {
    // torchtitan's debug flavor: small enough to train on a laptop CPU.
    a.dim = 256, a.n_layers = 6, a.n_heads = 16, a.vocab_size = 2048;
  } else if (flavor == "1B") {
    // Llama 3.2 1B as Meta publishes it (meta-llama/Llama-3.2-1B config.json:
    // hidden_size 2048, 16 layers, 32 heads, 8 KV heads, intermediate_size
    // 8192, vocab 128256, rope_theta 500000, llama3 rope scaling factor 32,
    // tie_word_embeddings true): 1,235,814,400 parameters ("1.23B").
    // torchtitan 0.3's 1B ties the same way (enable_weight_tying).
    a.dim = 2048, a.n_layers = 16, a.n_heads = 32, a.n_kv_heads = 8;
    a.ffn_dim_multiplier = 1.5, a.multiple_of = 256;  // 4·2048 → 5461 → 8191 → 8192
    a.rope_scaling.factor = 32.0;
    a.tie_word_embeddings = true;
  } else if (flavor == "3B") {
    // Llama 3.2 3B (meta-llama/Llama-3.2-3B config.json: hidden_size 3072,
    // 28 layers, 24 heads, 8 KV heads, intermediate_size 8192, vocab 128256,
    // rope factor 32, tied): 3,212,749,824 parameters ("3.21B").
    a.dim = 3072, a.n_layers = 28, a.n_heads = 24, a.n_kv_heads = 8;
    a.ffn_dim_multiplier = 1.0, a.multiple_of = 256;  // 4·3072 → 8192 → 8192
    a.rope_scaling.factor = 32.0;
    a.tie_word_embeddings = true;
  } else if (flavor == "8B") {
    a.dim = 4096, a.n_layers = 32, a.n_heads = 32, a.n_kv_heads = 8;
    a.ffn_dim_multiplier = 1.3, a.multiple_of = 1024;
  } else if (flavor == "70B") {
    a.dim = 8192, a.n_layers = 80, a.n_heads = 64, a.n_kv_heads = 8;
    a.ffn_dim_multiplier = 1.3, a.multiple_of = 4096;
  } else if (flavor == "405B") {
    a.dim = 16384, a.n_layers = 126, a.n_heads = 128, a.n_kv_heads = 8;
    a.ffn_dim_multiplier = 1.2, a.multiple_of = 4096;
  } else {
    std::ostringstream valid;
    for (size_t i = 0; i < flavor_names().size(); ++i) valid << (i ? ", " : "") << flavor_names()[i];
    throw Error("model: unknown llama3 flavor '" + flavor + "' (valid: " + valid.str() + ")");
  }
  return a;
}

ModelArgs flavor_args(const std::string& flavor, int64_t n_layers) {
  ShapeOverrides o;
  o.n_layers = n_layers;
  return flavor_args(flavor, o);
}

ModelArgs flavor_args(const std::string& flavor, const ShapeOverrides& o) {
  for (const auto& [key, value] :
       {std::pair<const char*, int64_t>{"n_layers", o.n_layers}, {"dim", o.dim}, {"n_heads", o.n_heads},
        {"n_kv_heads", o.n_kv_heads}, {"ffn_hidden_size", o.ffn_hidden_size}, {"vocab_size", o.vocab_size}})
    TITAN_CHECK(value >= 0, "[model] ", key, " must be 0 (the flavor's) or positive, got ", value);
  ModelArgs a = flavor_args(flavor);
  if (o.n_layers > 0) a.n_layers = o.n_layers;
  if (o.dim > 0) a.dim = o.dim;
  if (o.n_heads > 0) a.n_heads = o.n_heads;
  if (o.n_kv_heads > 0) a.n_kv_heads = o.n_kv_heads;
  if (o.vocab_size > 0) a.vocab_size = o.vocab_size;
  if (o.ffn_hidden_size > 0)
    TITAN_CHECK(set_ffn_hidden_dim(a, o.ffn_hidden_size), "[model] ffn_hidden_size = ", o.ffn_hidden_size,
                " cannot be expressed as Llama's FFN recipe for dim ", a.dim);
  a.validate();
  return a;
}

ModelArgs flavor_args(const config::ModelSection& model) {
  ShapeOverrides o;
  o.n_layers = model.n_layers, o.dim = model.dim, o.n_heads = model.n_heads, o.n_kv_heads = model.n_kv_heads;
  o.ffn_hidden_size = model.ffn_hidden_size, o.vocab_size = model.vocab_size;
  return flavor_args(model.flavor, o);
}

}  // namespace titan::models::llama3
