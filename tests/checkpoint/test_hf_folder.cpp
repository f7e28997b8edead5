// HF folders: single file and sharded (index) layouts written and read back
// bitwise, export dtypes, tied embeddings, one-line errors for a missing
// config, shard or tensor, and a titan checkpoint exported tensor by tensor.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "checkpoint/hf_test_util.hpp"
#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/hf_config.hpp"
#include "titan/checkpoint/hf_folder.hpp"
#include "titan/checkpoint/hf_sharded_load.hpp"
#include "titan/checkpoint/safetensors.hpp"
#include "titan/checkpoint/tensor_stream.hpp"
#include "titan/checkpoint/torchtitan_v03.hpp"
#include "titan/metrics/tensor_memory.hpp"
#include "titan/util/files.hpp"
#include "titan/util/error.hpp"

using namespace titan::checkpoint;
namespace files = titan::files;

namespace {

struct Fixture {
  titan::models::llama3::ModelArgs args = titan::testing::tiny_hf_args();
  titan::models::llama3::Transformer model = titan::testing::seeded_model(args, 21);
  StateDict state = titan::testing::state_of(model);
  std::string dir = titan::testing::scratch_dir("hf_folder");
  ~Fixture() { titan::testing::remove_scratch_dir(dir); }
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string folder_error(const std::string& folder) {
  try {
    read_hf_folder(folder);
  } catch (const titan::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(HfFolder, SingleFileRoundTripIsBitwise) {
  Fixture f;
  const std::string out = f.dir + "/hf";
  write_hf_folder(out, f.state, f.args, at::kFloat);
  EXPECT_TRUE(files::is_regular_file(out + "/config.json"));
  EXPECT_TRUE(files::is_regular_file(out + "/model.safetensors"));
  EXPECT_FALSE(files::exists(out + "/model.safetensors.index.json"));
  SafetensorsFile st = load_safetensors(out + "/model.safetensors");
  EXPECT_EQ(st.metadata.at("format"), "pt");
  // Model order, not alphabetical: layer 0 before layer 1, the head last.
  EXPECT_EQ(st.tensors.front().first, "model.embed_tokens.weight");
  EXPECT_EQ(st.tensors.back().first, "lm_head.weight");
  EXPECT_TRUE(is_hf_folder(out));

  HfCheckpoint back = read_hf_folder(out);
  titan::testing::expect_bitwise_equal(back.titan_state, f.state);
  EXPECT_EQ(back.args.ffn_hidden_dim(), f.args.ffn_hidden_dim());
  EXPECT_EQ(back.args.kv_heads(), 2);
  EXPECT_TRUE(back.args.rope_scaling.enabled);
  EXPECT_FALSE(back.tied_embeddings);
}

TEST(HfFolder, ShardedRoundTripIsBitwise) {
  Fixture f;
  const std::string out = f.dir + "/hf";
  // 20 KB: the 32 KB embedding and head and the 48 KB FFN matrices get a
  // shard each; the attention matrices (16 KB wq/wo, 8 KB wk/wv) and the
  // norms share shards up to the limit.
  const int64_t limit = 20'000;
  write_hf_folder(out, f.state, f.args, at::kFloat, limit);
  EXPECT_FALSE(files::exists(out + "/model.safetensors"));
  auto index = nlohmann::json::parse(read_text(out + "/model.safetensors.index.json"));
  int64_t total = 0;
  for (const auto& [name, t] : f.state) total += t.numel() * 4;
  EXPECT_EQ(index["metadata"]["total_size"], total);
  EXPECT_EQ(index["weight_map"].size(), f.state.size());
  const std::string first = index["weight_map"]["model.embed_tokens.weight"];
  const std::string last = index["weight_map"]["lm_head.weight"];
  EXPECT_EQ(first.substr(0, 12), "model-00001-");
  const size_t n = std::stoul(last.substr(15, 5));
  EXPECT_GT(n, 3u);
  char last_name[64];
  std::snprintf(last_name, sizeof last_name, "model-%05zu-of-%05zu.safetensors", n, n);
  EXPECT_EQ(last, last_name);
  for (size_t k = 1; k <= n; ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "/model-%05zu-of-%05zu.safetensors", k, n);
    SafetensorsFile shard = load_safetensors(out + name);
    int64_t bytes = 0;
    for (const auto& [tn, t] : shard.tensors) bytes += t.numel() * 4;
    EXPECT_TRUE(bytes <= limit || shard.tensors.size() == 1) << name << " holds " << bytes << " bytes";
    EXPECT_EQ(shard.metadata.at("format"), "pt");
  }
  titan::testing::expect_bitwise_equal(read_hf_folder(out).titan_state, f.state);

  // Re-exported unsharded into the same folder: the stale index goes, so
  // readers see the new file.
  write_hf_folder(out, f.state, f.args, at::kFloat);
  EXPECT_FALSE(files::exists(out + "/model.safetensors.index.json"));
  titan::testing::expect_bitwise_equal(read_hf_folder(out).titan_state, f.state);
}

TEST(HfFolder, ExportDtypeCastsEveryTensor) {
  Fixture f;
  write_hf_folder(f.dir + "/bf16", f.state, f.args, at::kBFloat16);
  HfCheckpoint back = read_hf_folder(f.dir + "/bf16");
  for (const auto& [name, t] : back.titan_state) {
    EXPECT_EQ(t.scalar_type(), at::kBFloat16) << name;
    EXPECT_TRUE(t.equal(f.state.at(name).to(at::kBFloat16))) << name;
  }
  EXPECT_NE(read_text(f.dir + "/bf16/config.json").find("\"torch_dtype\": \"bfloat16\""), std::string::npos);
}

// A tied model (Llama 3.2 1B/3B) is written as save_pretrained writes one:
// tie_word_embeddings true and no lm_head.weight; read back it stays tied.
TEST(HfFolder, TiedEmbeddingsRoundTripAsOneTensor) {
  Fixture f;
  titan::models::llama3::ModelArgs tied = f.args;
  tied.tie_word_embeddings = true;
  titan::models::llama3::Transformer model = titan::testing::seeded_model(tied, 22);
  StateDict state = titan::testing::state_of(model);
  EXPECT_FALSE(state.count("output.weight"));
  const std::string out = f.dir + "/tied";
  write_hf_folder(out, state, tied, at::kFloat);
  for (auto& [name, t] : load_safetensors(out + "/model.safetensors").tensors)
    EXPECT_NE(name, "lm_head.weight");
  EXPECT_EQ(nlohmann::json::parse(read_text(out + "/config.json"))["tie_word_embeddings"], true);
  HfCheckpoint back = read_hf_folder(out);
  EXPECT_TRUE(back.tied_embeddings);
  EXPECT_TRUE(back.args.tie_word_embeddings);
  titan::testing::expect_bitwise_equal(back.titan_state, state);

  // Some tied folders still carry an lm_head copy; transformers ties over
  // it on load, and so does titan.
  std::vector<std::pair<std::string, at::Tensor>> with_head = load_safetensors(out + "/model.safetensors").tensors;
  with_head.emplace_back("lm_head.weight", state.at("tok_embeddings.weight").clone());
  save_safetensors(out + "/model.safetensors", with_head, {{"format", "pt"}});
  titan::testing::expect_bitwise_equal(read_hf_folder(out).titan_state, state);

  // An untied model's state does not fit tied args: one line naming output.weight.
  try {
    write_hf_folder(f.dir + "/bad", f.state, tied, at::kFloat);
    ADD_FAILURE() << "no error";
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected tensor 'output.weight'"), std::string::npos) << e.what();
  }
}

TEST(HfFolder, ErrorsNameTheMissingPiece) {
  Fixture f;
  EXPECT_NE(folder_error(f.dir + "/nowhere").find("nowhere is not a folder"), std::string::npos);

  const std::string out = f.dir + "/hf";
  write_hf_folder(out, f.state, f.args, at::kFloat, 20'000);
  auto index = nlohmann::json::parse(read_text(out + "/model.safetensors.index.json"));
  const std::string shard = index["weight_map"]["model.layers.0.self_attn.q_proj.weight"];
  // A tensor the index lists but its shard lacks.
  {
    std::vector<std::pair<std::string, at::Tensor>> kept;
    for (auto& [name, t] : load_safetensors(out + "/" + shard).tensors)
      if (name != "model.layers.0.self_attn.q_proj.weight") kept.emplace_back(name, t);
    save_safetensors(out + "/" + shard, kept, {{"format", "pt"}});
  }
  std::string m = folder_error(out);
  EXPECT_NE(m.find("tensor 'model.layers.0.self_attn.q_proj.weight' is listed in model.safetensors.index.json"),
            std::string::npos) << m;
  // A whole shard missing.
  std::remove((out + "/" + shard).c_str());
  m = folder_error(out);
  EXPECT_NE(m.find("shard " + out + "/" + shard), std::string::npos) << m;
  EXPECT_NE(m.find("is missing"), std::string::npos) << m;

  // A tensor missing from a single-file folder: named, with its HF name.
  const std::string single = f.dir + "/single";
  write_hf_folder(single, f.state, f.args, at::kFloat);
  {
    std::vector<std::pair<std::string, at::Tensor>> kept;
    for (auto& [name, t] : load_safetensors(single + "/model.safetensors").tensors)
      if (name != "model.layers.1.mlp.up_proj.weight") kept.emplace_back(name, t);
    save_safetensors(single + "/model.safetensors", kept, {{"format", "pt"}});
  }
  m = folder_error(single);
  EXPECT_NE(m.find("missing tensor 'layers.1.feed_forward.w3.weight' (model.layers.1.mlp.up_proj.weight"),
            std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;

  std::remove((single + "/model.safetensors").c_str());
  EXPECT_NE(folder_error(single).find("has neither model.safetensors nor model.safetensors.index.json"),
            std::string::npos);
  std::remove((single + "/config.json").c_str());
  EXPECT_NE(folder_error(single).find("has no config.json"), std::string::npos);

  // A bad config key, reported with the file's path.
  const std::string bad = f.dir + "/bad";
  write_hf_folder(bad, f.state, f.args, at::kFloat);
  auto config = nlohmann::json::parse(read_text(bad + "/config.json"));
  config["mlp_bias"] = true;
  std::ofstream(bad + "/config.json") << config.dump();
  m = folder_error(bad);
  EXPECT_NE(m.find(bad + "/config.json: key 'mlp_bias'"), std::string::npos) << m;
}

// load_hf_shards (a job's initial load from an HF folder): every box of
// every tensor, cut at rows that straddle heads (3 uneven row cuts) and, for
// matrices, into two column halves as TP's column-wise split does, holds
// exactly the titan tensor's box: the q/k rows come back from HF's
// rotate-half order whatever head a cut falls in. From a sharded folder
// (several files), and from a bf16 one into fp32 boxes (the cast values).
TEST(HfFolder, ShardedLoadFillsAnyBoxInTitansLayout) {
  Fixture f;
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const std::string out = f.dir + "/hf_" + std::string(c10::toString(dtype));
    write_hf_folder(out, f.state, f.args, dtype, /*max_shard_bytes=*/20'000);
    ShardedState targets;
    for (const auto& [name, t] : f.state) {
      const int64_t rows = t.size(0);
      const std::vector<int64_t> cuts = {0, rows / 3 + 1, (2 * rows) / 3 + 1, rows};
      for (size_t k = 0; k + 1 < cuts.size(); ++k) {
        const int64_t r0 = cuts[k], n = cuts[k + 1] - cuts[k];
        if (t.dim() == 1) {
          targets.push_back({name, at::zeros({n}), t.sizes().vec(), {r0}});
          continue;
        }
        const int64_t half = t.size(1) / 2;
        for (const int64_t c0 : {int64_t{0}, half})
          targets.push_back({name, at::zeros({n, c0 == 0 ? half : t.size(1) - half}), t.sizes().vec(), {r0, c0}});
      }
    }
    load_hf_shards(out, targets, f.args);
    for (const TensorShard& s : targets) {
      at::Tensor want = f.state.at(s.fqn).to(dtype).to(at::kFloat).narrow(0, s.offsets[0], s.local.size(0));
      if (s.local.dim() == 2) want = want.narrow(1, s.offsets[1], s.local.size(1));
      EXPECT_TRUE(s.local.equal(want)) << c10::toString(dtype) << " " << s.fqn << " rows from " << s.offsets[0];
    }
  }
  // A head count that keeps every shape (the permutation would be silently
  // wrong) and a tensor missing from the folder are one-line errors.
  titan::models::llama3::ModelArgs other = f.args;
  other.n_heads = 2;
  other.n_kv_heads = 1;
  ShardedState one = {{"layers.0.attention.wq.weight", at::zeros(f.state.at("layers.0.attention.wq.weight").sizes()),
                       f.state.at("layers.0.attention.wq.weight").sizes().vec(), {0, 0}}};
  const std::string out = f.dir + "/hf_Float";
  try {
    load_hf_shards(out, one, other);
    ADD_FAILURE() << "a head count that differs from config.json's loaded";
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has 4 query and 2 key/value heads, the model 2 and 1"), std::string::npos)
        << e.what();
  }
  one[0].fqn = "layers.9.attention.wq.weight";
  try {
    load_hf_shards(out, one, f.args);
    ADD_FAILURE() << "a tensor the folder lacks loaded";
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no tensor model.layers.9.self_attn.q_proj.weight"), std::string::npos)
        << e.what();
  }
}

// A titan checkpoint saved by two ranks (each tensor in two row boxes, one
// per rank file) exported tensor by tensor: the folder write_hf_folder
// writes from the whole state, byte for byte, while the CPU tensors held at
// once stay within two of the largest tensor, not the model.
TEST(HfFolder, CheckpointExportsOneTensorAtATime) {
  Fixture f;
  f.args.n_layers = 4;  // the model eight times its largest tensor and more
  f.model = titan::testing::seeded_model(f.args, 23);
  f.state = titan::testing::state_of(f.model);
  const std::string partial = f.dir + "/step-5.partial", step = f.dir + "/step-5";
  files::make_directories(partial);
  std::vector<RankFile> rank_files;
  for (int rank = 0; rank < 2; ++rank) {
    ShardedState boxes;
    for (const auto& [name, t] : f.state) {
      const int64_t half = t.size(0) / 2 + 1, begin = rank == 0 ? 0 : half, rows = rank == 0 ? half : t.size(0) - half;
      std::vector<int64_t> offsets(static_cast<size_t>(t.dim()), 0);
      offsets[0] = begin;
      boxes.push_back({name, t.narrow(0, begin, rows).contiguous(), t.sizes().vec(), offsets, true});
    }
    rank_files.push_back(write_rank_file(partial, rank, boxes));
  }
  finalize_checkpoint(partial, step, 5, rank_files, {{"content", "model"}, {"train_state", {{"step", 5}}}});

  int64_t largest = 0, model_bytes = 0;
  for (const auto& [name, t] : f.state) {
    largest = std::max(largest, t.numel() * 4);
    model_bytes += t.numel() * 4;
  }
  const int64_t limit = 20'000;  // several files, as in ShardedRoundTripIsBitwise
  titan::metrics::track_cpu_tensor_memory();
  const c10::Device cpu(c10::kCPU);
  const int64_t before = titan::metrics::tensor_memory(cpu).current_bytes;
  titan::metrics::reset_tensor_memory_peak(cpu);
  write_hf_folder(f.dir + "/streamed", checkpoint_stream(open_checkpoint(step)), f.args, at::kBFloat16, limit);
  const int64_t streamed_peak = titan::metrics::tensor_memory(cpu).peak_bytes - before;
  titan::metrics::reset_tensor_memory_peak(cpu);
  write_hf_folder(f.dir + "/whole", read_model_tensors(step), f.args, at::kBFloat16, limit);
  const int64_t whole_peak = titan::metrics::tensor_memory(cpu).peak_bytes - before;

  const std::vector<std::string> want = files::list_files(f.dir + "/whole");
  ASSERT_EQ(files::list_files(f.dir + "/streamed").size(), want.size());
  for (const std::string& w : want)
    EXPECT_EQ(read_text(f.dir + "/streamed/" + files::base_name(w)), read_text(w)) << files::base_name(w);
  std::printf("model %lld bytes (fp32), largest tensor %lld: CPU tensor peak %lld bytes tensor by tensor, %lld "
              "reading the model whole\n",
              static_cast<long long>(model_bytes), static_cast<long long>(largest),
              static_cast<long long>(streamed_peak), static_cast<long long>(whole_peak));
  EXPECT_GT(model_bytes, 4 * 2 * largest);
  EXPECT_LE(streamed_peak, 2 * largest);
  EXPECT_GE(whole_peak, model_bytes);

  // The checks come first: a checkpoint of another flavor writes nothing.
  titan::models::llama3::ModelArgs other = f.args;
  other.n_layers = 2;
  try {
    write_hf_folder(f.dir + "/other", checkpoint_stream(open_checkpoint(step)), other, at::kFloat);
    ADD_FAILURE() << "a 4-layer checkpoint exported as 2 layers";
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected tensor 'layers.2."), std::string::npos) << e.what();
  }
  EXPECT_FALSE(files::exists(f.dir + "/other"));
}

// The other direction, and the renames: an HF folder imported as a titan
// checkpoint, and a checkpoint renamed to torchtitan 0.3's fused names and
// back, each one tensor at a time (as `titan convert` does): the same files
// as from the whole state, while the CPU tensors held at once stay within
// the largest tensor for the import and two of it for the renames (a fused
// wqkv beside its three projections).
TEST(HfFolder, ImportsAndRenamesOneTensorAtATime) {
  Fixture f;
  f.args.n_layers = 4;
  f.model = titan::testing::seeded_model(f.args, 29);
  f.state = titan::testing::state_of(f.model);
  const std::string hf = f.dir + "/hf";
  write_hf_folder(hf, f.state, f.args, at::kFloat, /*max_shard_bytes=*/20'000);  // several files
  int64_t largest = 0, model_bytes = 0;
  for (const auto& [name, t] : f.state) {
    largest = std::max(largest, t.numel() * 4);
    model_bytes += t.numel() * 4;
  }
  titan::metrics::track_cpu_tensor_memory();
  const c10::Device cpu(c10::kCPU);
  const int64_t before = titan::metrics::tensor_memory(cpu).current_bytes;
  auto peak_of = [&](const std::function<void()>& work) {
    titan::metrics::reset_tensor_memory_peak(cpu);
    work();
    return titan::metrics::tensor_memory(cpu).peak_bytes - before;
  };
  const int64_t import_peak =
      peak_of([&] { write_model_checkpoint(f.dir + "/streamed/step-0", open_hf_folder(hf).tensors, 0); });
  const int64_t fuse_peak = peak_of([&] {
    write_model_checkpoint(f.dir + "/fused/step-0",
                           to_torchtitan_v03(checkpoint_stream(open_checkpoint(f.dir + "/streamed/step-0")), f.args,
                                             /*fused=*/true),
                           0);
  });
  const int64_t split_peak = peak_of([&] {
    write_model_checkpoint(f.dir + "/back/step-0",
                           from_torchtitan_v03(checkpoint_stream(open_checkpoint(f.dir + "/fused/step-0")), f.args), 0);
  });
  const int64_t whole_peak =
      peak_of([&] { write_model_checkpoint(f.dir + "/whole/step-0", read_hf_folder(hf).titan_state, 0); });

  const std::string rank0 = "/step-0/" + rank_file_name(0);
  EXPECT_EQ(read_text(f.dir + "/streamed" + rank0), read_text(f.dir + "/whole" + rank0));
  EXPECT_EQ(read_text(f.dir + "/back" + rank0), read_text(f.dir + "/whole" + rank0));
  titan::testing::expect_bitwise_equal(read_model_tensors(f.dir + "/streamed/step-0"), f.state);
  titan::testing::expect_bitwise_equal(read_model_tensors(f.dir + "/fused/step-0"),
                                       to_torchtitan_v03(f.state, f.args, /*fused=*/true));
  std::printf("model %lld bytes (fp32), largest tensor %lld: CPU tensor peak tensor by tensor %lld (HF import), "
              "%lld (fusing wqkv), %lld (splitting it); %lld reading the model whole\n",
              static_cast<long long>(model_bytes), static_cast<long long>(largest),
              static_cast<long long>(import_peak), static_cast<long long>(fuse_peak),
              static_cast<long long>(split_peak), static_cast<long long>(whole_peak));
  EXPECT_GT(model_bytes, 4 * 2 * largest);
  EXPECT_LE(import_peak, largest);  // each tensor read into its own memory once
  EXPECT_LE(fuse_peak, 2 * largest);
  EXPECT_LE(split_peak, 2 * largest);
  EXPECT_GE(whole_peak, model_bytes);

  // The checks come first: a folder of another flavor is refused before a value is read.
  titan::models::llama3::ModelArgs other = f.args;
  other.n_layers = 2;
  const int64_t refused_peak = peak_of([&] {
    try {
      to_torchtitan_v03(open_hf_folder(hf).tensors, other, /*fused=*/false);
      ADD_FAILURE() << "a 4-layer folder renamed as 2 layers";
    } catch (const titan::Error& e) {
      EXPECT_NE(std::string(e.what()).find("unexpected tensor 'layers.2."), std::string::npos) << e.what();
    }
  });
  EXPECT_EQ(refused_peak, 0);
}

// A long conversion says how far it is: the wrapped stream reports after a
// read once the interval has passed (0: after every read), counting the
// tensors and bytes read, and passes the values through unchanged.
TEST(TensorStream, ProgressCountsTensorsAndBytesRead) {
  Fixture f;
  std::vector<StreamProgress> reports;
  const TensorStream every = with_progress(stream_of(f.state), 0.0, [&](const StreamProgress& p) {
    reports.push_back(p);
  });
  titan::testing::expect_bitwise_equal(every.read_all(), f.state);
  int64_t bytes = 0;
  for (const auto& [name, t] : f.state) bytes += t.numel() * 4;
  ASSERT_EQ(reports.size(), f.state.size());
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].tensors_read, static_cast<int64_t>(i + 1));
    EXPECT_EQ(reports[i].tensors, static_cast<int64_t>(f.state.size()));
    EXPECT_EQ(reports[i].bytes, bytes);
    if (i > 0) EXPECT_GT(reports[i].bytes_read, reports[i - 1].bytes_read);
  }
  EXPECT_EQ(reports.back().bytes_read, bytes);
  reports.clear();
  // A read-through shorter than the interval says nothing.
  with_progress(cast_stream(stream_of(f.state), at::kBFloat16), 3600.0, [&](const StreamProgress& p) {
    reports.push_back(p);
  }).read_all();
  EXPECT_TRUE(reports.empty());
}
