#include "titan/models/llama3/state_dict_adapter.hpp"

#include <cctype>
#include <set>
#include <sstream>

#include "titan/util/error.hpp"
#include "titan/util/strings.hpp"

namespace titan::models::llama3 {

namespace {

struct NamePair {
  const char* titan;
  const char* hf;
};

// The whole-model tensors, and the per-block ones (after "layers.N." /
// "model.layers.N."). One table read in both directions, so the two maps
// cannot drift apart.
constexpr NamePair kGlobalNames[] = {
    {"tok_embeddings.weight", "model.embed_tokens.weight"},
    {"norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
constexpr NamePair kBlockNames[] = {
    {"attention.wq.weight", "self_attn.q_proj.weight"},
    {"attention.wk.weight", "self_attn.k_proj.weight"},
    {"attention.wv.weight", "self_attn.v_proj.weight"},
    {"attention.wo.weight", "self_attn.o_proj.weight"},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
    {"feed_forward.w2.weight", "mlp.down_proj.weight"},
    {"feed_forward.w3.weight", "mlp.up_proj.weight"},
    {"attention_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
};

// Splits "<prefix><digits>.<rest>" into (digits, rest); false if it is not that.
bool split_layer(const std::string& name, const std::string& prefix, std::string& layer,
                 std::string& rest) {
  if (name.rfind(prefix, 0) != 0) return false;
  size_t i = prefix.size(), j = i;
  while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
  if (j == i || j >= name.size() || name[j] != '.') return false;
  layer = name.substr(i, j - i);
  rest = name.substr(j + 1);
  return true;
}

std::string shape_str(at::IntArrayRef s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// The one reshape behind both permutations: per head, the head_dim rows seen
// as [a, b] are transposed to [b, a]. Interleaved pairs are [head_dim/2, 2]
// (row 2i + c); rotate-half is [2, head_dim/2] (row c·head_dim/2 + i).
at::Tensor permute_rows(const at::Tensor& w, int64_t heads, bool to_half) {
  TITAN_CHECK(w.dim() == 2 && heads > 0 && w.size(0) % heads == 0,
              "hf: cannot permute a projection of shape ", shape_str(w.sizes()), " over ", heads, " heads");
  const int64_t head_dim = w.size(0) / heads, in = w.size(1);
  TITAN_CHECK(head_dim % 2 == 0, "hf: head_dim ", head_dim, " must be even for RoPE");
  const int64_t a = to_half ? head_dim / 2 : 2, b = to_half ? 2 : head_dim / 2;
  return w.reshape({heads, a, b, in}).transpose(1, 2).reshape({heads * head_dim, in}).contiguous();
}

}  // namespace

std::vector<std::pair<std::string, std::vector<int64_t>>> titan_llama_shapes(
    const ModelArgs& args) {
  args.validate();
  const int64_t dim = args.dim, hq = args.n_heads * args.head_dim(),
                hkv = args.kv_heads() * args.head_dim(), ffn = args.ffn_hidden_dim();
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  out.push_back({"tok_embeddings.weight", {args.vocab_size, dim}});
  for (int64_t l = 0; l < args.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    out.push_back({p + "attention.wq.weight", {hq, dim}});
    out.push_back({p + "attention.wk.weight", {hkv, dim}});
    out.push_back({p + "attention.wv.weight", {hkv, dim}});
    out.push_back({p + "attention.wo.weight", {dim, hq}});
    out.push_back({p + "feed_forward.w1.weight", {ffn, dim}});
    out.push_back({p + "feed_forward.w2.weight", {dim, ffn}});
    out.push_back({p + "feed_forward.w3.weight", {ffn, dim}});
    out.push_back({p + "attention_norm.weight", {dim}});
    out.push_back({p + "ffn_norm.weight", {dim}});
  }
  out.push_back({"norm.weight", {dim}});
  if (!args.tie_word_embeddings) out.push_back({"output.weight", {args.vocab_size, dim}});
  return out;
}

std::string hf_name(const std::string& name) {
  for (const auto& n : kGlobalNames)
    if (name == n.titan) return n.hf;
  std::string layer, rest;
  if (split_layer(name, "layers.", layer, rest))
    for (const auto& n : kBlockNames)
      if (rest == n.titan) return "model.layers." + layer + "." + n.hf;
  throw Error("hf: '" + name + "' is not a tensor of torchtitan's Llama 3 state dict");
}

std::string titan_name(const std::string& name) {
  for (const auto& n : kGlobalNames)
    if (name == n.hf) return n.titan;
  std::string layer, rest;
  if (split_layer(name, "model.layers.", layer, rest))
    for (const auto& n : kBlockNames)
      if (rest == n.hf) return "layers." + layer + "." + n.titan;
  throw Error("hf: '" + name + "' is not a tensor of HF's LlamaForCausalLM (bias, or another architecture?)");
}

int64_t rope_permuted_heads(const std::string& titan_name, const ModelArgs& args) {
  // wk has n_kv_heads heads under GQA, wq n_heads; wv is not rotated.
  if (ends_with(titan_name, ".attention.wq.weight")) return args.n_heads;
  if (ends_with(titan_name, ".attention.wk.weight")) return args.kv_heads();
  return 0;
}

at::Tensor interleaved_to_half(const at::Tensor& w, int64_t heads) { return permute_rows(w, heads, true); }

at::Tensor half_to_interleaved(const at::Tensor& w, int64_t heads) { return permute_rows(w, heads, false); }

void check_titan_state(const StateDict& state, const ModelArgs& args,
                       const std::string& what) {
  std::set<std::string> expected;
  for (const auto& [name, shape] : titan_llama_shapes(args)) {
    expected.insert(name);
    auto it = state.find(name);
    TITAN_CHECK(it != state.end(), what, ": missing tensor '", name, "' (", hf_name(name), " in HF)");
    TITAN_CHECK(it->second.defined() && it->second.sizes() == at::IntArrayRef(shape), what, ": tensor '",
                name, "' has shape ", it->second.defined() ? shape_str(it->second.sizes()) : "undefined",
                " but the model args need ", shape_str(shape));
  }
  for (const auto& [name, t] : state)
    TITAN_CHECK(expected.count(name), what, ": unexpected tensor '", name, "' for a Llama 3 with ",
                args.n_layers, " layers",
                name == "output.weight" ? " whose output is tied to tok_embeddings (tie_word_embeddings)" : "");
}

StateDict to_hf_state(const StateDict& titan_state, const ModelArgs& args) {
  check_titan_state(titan_state, args, "hf export");
  StateDict out;
  for (const auto& [name, t] : titan_state) {
    const int64_t heads = rope_permuted_heads(name, args);
    out.emplace(hf_name(name), heads > 0 ? interleaved_to_half(t, heads) : t);
  }
  return out;
}

StateDict from_hf_state(const StateDict& hf_state, const ModelArgs& args) {
  StateDict out;
  for (const auto& [name, t] : hf_state) {
    // Older HF checkpoints store the RoPE frequencies as a buffer; they are
    // recomputed from the config, so the copy in the file is not model state.
    if (ends_with(name, ".rotary_emb.inv_freq")) continue;
    out.emplace(titan_name(name), t);
  }
  // Shapes first, so that a wrong head count reads as a shape error naming
  // the tensor rather than as a failed permutation.
  check_titan_state(out, args, "hf import");
  for (auto& [name, w] : out) {
    if (ends_with(name, ".attention.wq.weight")) w = half_to_interleaved(w, args.n_heads);
    else if (ends_with(name, ".attention.wk.weight")) w = half_to_interleaved(w, args.kv_heads());
  }
  return out;
}

}  // namespace titan::models::llama3
