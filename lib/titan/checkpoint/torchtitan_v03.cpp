#include "titan/checkpoint/torchtitan_v03.hpp"

#include <sstream>

#include "titan/util/error.hpp"
#include "titan/util/strings.hpp"
#include "titan/models/llama3/state_dict_adapter.hpp"

namespace titan::checkpoint {

using models::llama3::check_titan_state;

namespace {

constexpr const char* kQkv[] = {"wq", "wk", "wv"};

bool starts_with(const std::string& s, const std::string& head) { return s.rfind(head, 0) == 0; }

std::string shape_str(at::IntArrayRef s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// "layers.N." of a per-layer name, or "" for a whole-model one.
std::string layer_prefix(const std::string& name) {
  if (!starts_with(name, "layers.")) return "";
  const size_t dot = name.find('.', 7);
  return dot == std::string::npos ? "" : name.substr(0, dot + 1);
}

}  // namespace

at::Tensor fuse_qkv(const at::Tensor& wq, const at::Tensor& wk, const at::Tensor& wv, int64_t n_heads,
                    int64_t n_kv_heads) {
  TITAN_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "fuse_qkv: n_heads ", n_heads,
              " is not a multiple of n_kv_heads ", n_kv_heads);
  TITAN_CHECK(wq.dim() == 2 && wk.sizes() == wv.sizes() && wk.dim() == 2 && wk.size(0) % n_kv_heads == 0 &&
                  wq.size(1) == wk.size(1),
              "fuse_qkv: wq ", shape_str(wq.sizes()), ", wk ", shape_str(wk.sizes()), ", wv ", shape_str(wv.sizes()),
              " are not the projections of one attention");
  const int64_t d = wk.size(0) / n_kv_heads, hpk = n_heads / n_kv_heads, in = wq.size(1);
  TITAN_CHECK(wq.size(0) == n_heads * d, "fuse_qkv: wq has ", wq.size(0), " rows, ", n_heads, " heads of ", d,
              " need ", n_heads * d);
  return at::cat({wq.reshape({n_kv_heads, hpk, d, in}), wk.reshape({n_kv_heads, 1, d, in}),
                  wv.reshape({n_kv_heads, 1, d, in})},
                 1)
      .reshape({n_kv_heads * (hpk + 2) * d, in})
      .contiguous();
}

std::vector<at::Tensor> split_qkv(const at::Tensor& wqkv, int64_t n_heads, int64_t n_kv_heads) {
  TITAN_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "split_qkv: n_heads ", n_heads,
              " is not a multiple of n_kv_heads ", n_kv_heads);
  const int64_t hpk = n_heads / n_kv_heads, r = hpk + 2;
  TITAN_CHECK(wqkv.dim() == 2 && wqkv.size(0) % (n_kv_heads * r) == 0, "split_qkv: wqkv of shape ",
              shape_str(wqkv.sizes()), " does not split into ", n_kv_heads, " KV groups of ", hpk,
              " query heads + key + value");
  const int64_t d = wqkv.size(0) / (n_kv_heads * r), in = wqkv.size(1);
  at::Tensor w = wqkv.reshape({n_kv_heads, r, d, in});
  return {w.narrow(1, 0, hpk).reshape({n_heads * d, in}).contiguous(),
          w.narrow(1, hpk, 1).reshape({n_kv_heads * d, in}).contiguous(),
          w.narrow(1, hpk + 1, 1).reshape({n_kv_heads * d, in}).contiguous()};
}

bool has_torchtitan_v03_names(const StateDict& state) {
  for (const auto& [name, t] : state)
    if (name == "lm_head.weight" || name.find(".attention.qkv_linear.") != std::string::npos) return true;
  return false;
}

StateDict to_torchtitan_v03(const StateDict& titan_state, const models::llama3::ModelArgs& args, bool fused) {
  check_titan_state(titan_state, args, "torchtitan 0.3 export");
  StateDict out;
  for (const auto& [name, t] : titan_state) {
    if (name == "output.weight") {
      out.emplace("lm_head.weight", t);
      continue;
    }
    const std::string p = layer_prefix(name);
    bool qkv = false;
    for (const char* w : kQkv)
      if (!p.empty() && name == p + "attention." + w + ".weight") {
        qkv = true;
        if (!fused) out.emplace(p + "attention.qkv_linear." + w + ".weight", t);
      }
    if (qkv) {
      if (fused && ends_with(name, ".attention.wq.weight"))
        out.emplace(p + "attention.qkv_linear.wqkv.weight",
                    fuse_qkv(t, titan_state.at(p + "attention.wk.weight"), titan_state.at(p + "attention.wv.weight"),
                             args.n_heads, args.kv_heads()));
      continue;
    }
    out.emplace(name, t);
  }
  // Tied, torchtitan 0.3's state_dict() names the one parameter twice.
  if (args.tie_word_embeddings) out.emplace("lm_head.weight", titan_state.at("tok_embeddings.weight"));
  return out;
}

StateDict from_torchtitan_v03(const StateDict& v03, const models::llama3::ModelArgs& args) {
  StateDict out;
  for (const auto& [name, t] : v03) {
    if (name == "lm_head.weight") {
      if (!args.tie_word_embeddings) out.emplace("output.weight", t);
      continue;
    }
    const std::string p = layer_prefix(name);
    if (!p.empty() && name == p + "attention.qkv_linear.wqkv.weight") {
      for (const char* w : kQkv)
        TITAN_CHECK(!v03.count(p + "attention.qkv_linear." + w + ".weight"), "torchtitan 0.3 import: ", p,
                    "attention has both a fused wqkv and a separate ", w);
      std::vector<at::Tensor> parts;
      try {
        parts = split_qkv(t, args.n_heads, args.kv_heads());
      } catch (const Error& e) {
        throw Error("torchtitan 0.3 import: " + name + ": " + e.what());
      }
      for (int i = 0; i < 3; ++i) out.emplace(p + "attention." + kQkv[i] + ".weight", parts[static_cast<size_t>(i)]);
      continue;
    }
    bool mapped = false;
    for (const char* w : kQkv)
      if (!p.empty() && name == p + "attention.qkv_linear." + w + ".weight") {
        out.emplace(p + "attention." + w + ".weight", t);
        mapped = true;
      }
    if (mapped) continue;
    TITAN_CHECK(name != "output.weight" && name.find(".attention.wq.") == std::string::npos &&
                    name.find(".attention.wk.") == std::string::npos && name.find(".attention.wv.") == std::string::npos,
                "torchtitan 0.3 import: '", name, "' is a titan (torchtitan 0.2) name, mixed with 0.3 names");
    out.emplace(name, t);
  }
  if (args.tie_word_embeddings && v03.count("lm_head.weight") && v03.count("tok_embeddings.weight"))
    TITAN_CHECK(at::equal(v03.at("lm_head.weight"), v03.at("tok_embeddings.weight")),
                "torchtitan 0.3 import: the model ties lm_head to tok_embeddings but the two tensors differ");
  check_titan_state(out, args, "torchtitan 0.3 import");
  return out;
}

}  // namespace titan::checkpoint
