#include "titan/checkpoint/torchtitan_v03.hpp"

#include <sstream>

#include "titan/checkpoint/tensor_stream.hpp"
#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"
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

namespace {

// How one tensor of a renamed state is made from the tensors of the other
// naming: renamed as it is, fused from a layer's wq, wk, wv, or cut from
// a fused wqkv (its `part`: 0 = wq, 1 = wk, 2 = wv).
struct Recipe {
  enum class Kind { Rename, Fuse, Split } kind = Kind::Rename;
  std::vector<std::string> inputs;
  int part = 0;
};

at::Tensor make(const Recipe& r, const std::vector<at::Tensor>& in, const models::llama3::ModelArgs& args) {
  switch (r.kind) {
    case Recipe::Kind::Rename:
      return in[0];
    case Recipe::Kind::Fuse:
      return fuse_qkv(in[0], in[1], in[2], args.n_heads, args.kv_heads());
    case Recipe::Kind::Split:
      return split_qkv(in[0], args.n_heads, args.kv_heads())[static_cast<size_t>(r.part)];
  }
  TITAN_INTERNAL_ASSERT(false, "unknown recipe kind");
}

// The renamed stream: the layout made from the input's meta tensors (so a
// shape that does not fit fails before any value is read), each value from
// the inputs its recipe names, read when asked for.
TensorStream renamed(const TensorStream& in, std::map<std::string, Recipe> recipes,
                     const models::llama3::ModelArgs& args, const std::string& what) {
  TensorStream out;
  for (const auto& [name, r] : recipes) {
    std::vector<at::Tensor> metas;
    for (const std::string& i : r.inputs) metas.push_back(in.layout.at(i));
    try {
      out.layout.emplace(name, make(r, metas, args));
    } catch (const Error& e) {
      throw Error(what + ": " + r.inputs[0] + ": " + e.what());
    }
  }
  out.read = [read = in.read, recipes = std::move(recipes), args](const std::string& name) {
    const Recipe& r = recipes.at(name);
    std::vector<at::Tensor> values;
    for (const std::string& i : r.inputs) values.push_back(read(i));
    return make(r, values, args);
  };
  return out;
}

}  // namespace

TensorStream to_torchtitan_v03(const TensorStream& titan_state, const models::llama3::ModelArgs& args, bool fused) {
  check_titan_state(titan_state.layout, args, "torchtitan 0.3 export");
  std::map<std::string, Recipe> recipes;
  for (const auto& [name, t] : titan_state.layout) {
    if (name == "output.weight") {
      recipes["lm_head.weight"] = {Recipe::Kind::Rename, {name}};
      continue;
    }
    const std::string p = layer_prefix(name);
    bool qkv = false;
    for (const char* w : kQkv)
      if (!p.empty() && name == p + "attention." + w + ".weight") {
        qkv = true;
        if (!fused) recipes[p + "attention.qkv_linear." + w + ".weight"] = {Recipe::Kind::Rename, {name}};
      }
    if (qkv) {
      if (fused && ends_with(name, ".attention.wq.weight"))
        recipes[p + "attention.qkv_linear.wqkv.weight"] = {
            Recipe::Kind::Fuse, {name, p + "attention.wk.weight", p + "attention.wv.weight"}};
      continue;
    }
    recipes[name] = {Recipe::Kind::Rename, {name}};
  }
  // Tied, torchtitan 0.3's state_dict() names the one parameter twice.
  if (args.tie_word_embeddings) recipes["lm_head.weight"] = {Recipe::Kind::Rename, {"tok_embeddings.weight"}};
  return renamed(titan_state, std::move(recipes), args, "torchtitan 0.3 export");
}

TensorStream from_torchtitan_v03(const TensorStream& v03_state, const models::llama3::ModelArgs& args) {
  const StateDict& v03 = v03_state.layout;
  std::map<std::string, Recipe> recipes;
  for (const auto& [name, t] : v03) {
    if (name == "lm_head.weight") {
      if (!args.tie_word_embeddings) recipes["output.weight"] = {Recipe::Kind::Rename, {name}};
      continue;
    }
    const std::string p = layer_prefix(name);
    if (!p.empty() && name == p + "attention.qkv_linear.wqkv.weight") {
      for (const char* w : kQkv)
        TITAN_CHECK(!v03.count(p + "attention.qkv_linear." + w + ".weight"), "torchtitan 0.3 import: ", p,
                    "attention has both a fused wqkv and a separate ", w);
      for (int i = 0; i < 3; ++i) recipes[p + "attention." + kQkv[i] + ".weight"] = {Recipe::Kind::Split, {name}, i};
      continue;
    }
    bool mapped = false;
    for (const char* w : kQkv)
      if (!p.empty() && name == p + "attention.qkv_linear." + w + ".weight") {
        recipes[p + "attention." + w + ".weight"] = {Recipe::Kind::Rename, {name}};
        mapped = true;
      }
    if (mapped) continue;
    TITAN_CHECK(name != "output.weight" && name.find(".attention.wq.") == std::string::npos &&
                    name.find(".attention.wk.") == std::string::npos && name.find(".attention.wv.") == std::string::npos,
                "torchtitan 0.3 import: '", name, "' is a titan (torchtitan 0.2) name, mixed with 0.3 names");
    recipes[name] = {Recipe::Kind::Rename, {name}};
  }
  TensorStream out = renamed(v03_state, std::move(recipes), args, "torchtitan 0.3 import");
  check_titan_state(out.layout, args, "torchtitan 0.3 import");
  if (args.tie_word_embeddings && v03.count("lm_head.weight") && v03.count("tok_embeddings.weight")) {
    // The two names of one tied parameter must hold one value: checked
    // when the embedding is read (the two tensors in memory at once).
    out.read = [read = std::move(out.read), source = v03_state.read](const std::string& name) {
      at::Tensor t = read(name);
      if (name == "tok_embeddings.weight")
        TITAN_CHECK(at::equal(source("lm_head.weight"), t),
                    "torchtitan 0.3 import: the model ties lm_head to tok_embeddings but the two tensors differ");
      return t;
    };
  }
  return out;
}

StateDict to_torchtitan_v03(const StateDict& titan_state, const models::llama3::ModelArgs& args, bool fused) {
  return to_torchtitan_v03(stream_of(titan_state), args, fused).read_all();
}

StateDict from_torchtitan_v03(const StateDict& v03_state, const models::llama3::ModelArgs& args) {
  return from_torchtitan_v03(stream_of(v03_state), args).read_all();
}

}  // namespace titan::checkpoint
