#include "titan/checkpoint/hf_sharded_save.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/file_io.hpp"
#include "titan/checkpoint/hf_config.hpp"
#include "titan/checkpoint/safetensors.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/dist/world.hpp"
#include "titan/models/llama3/state_dict_adapter.hpp"
#include "titan/util/error.hpp"
#include "titan/util/files.hpp"
#include "titan/util/strings.hpp"

namespace titan::checkpoint {

namespace {

using models::llama3::hf_name;
using models::llama3::interleaved_to_half;
using models::llama3::rope_permuted_heads;
using models::llama3::titan_llama_shapes;

// Where one tensor goes: its file, and the file offset of its first byte.
struct PlannedTensor {
  std::string hf;
  std::vector<int64_t> shape;
  size_t file = 0;
  uint64_t begin = 0;
  int64_t heads = 0;  // > 0: a q/k projection, rows in rotate-half order over this many heads
  size_t index = 0;   // position in model order (for the coverage count)
  int64_t numel() const;
};

int64_t volume(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t d : sizes) n *= d;
  return n;
}

int64_t PlannedTensor::numel() const { return volume(shape); }

struct PlannedFile {
  std::string name;    // "model.safetensors" or "model-00001-of-00003.safetensors"
  std::string header;  // 8-byte length + JSON, as the file starts
  uint64_t size = 0;
  std::vector<std::string> tensors;  // HF names, in file order
};

// The whole folder, computed alike on every rank from the args alone.
struct Layout {
  std::vector<PlannedFile> files;
  std::map<std::string, PlannedTensor> tensors;  // by torchtitan name
  uint64_t data_bytes = 0;                        // the index's total_size
};

// HF's shard names: 1-based, five digits, "model-00001-of-00003.safetensors".
std::string shard_name(size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k, n);
  return buf;
}

Layout plan_layout(const models::llama3::ModelArgs& args, at::ScalarType dtype, int64_t max_shard_bytes) {
  TITAN_CHECK(max_shard_bytes > 0, "hf: max_shard_bytes must be positive, got ", max_shard_bytes);
  // Model order (embedding, layer 0, 1, ..., 10, ..., head) rather than
  // alphabetical, so that a layer's tensors share a file; each file filled
  // up to the limit, a tensor larger than it alone in its own.
  const int64_t elem = at::elementSize(dtype);
  std::vector<std::vector<std::pair<std::string, std::vector<int64_t>>>> groups(1);
  int64_t group_bytes = 0;
  for (const auto& [name, shape] : titan_llama_shapes(args)) {
    const int64_t bytes = elem * volume(shape);
    if (!groups.back().empty() && group_bytes + bytes > max_shard_bytes) {
      groups.emplace_back();
      group_bytes = 0;
    }
    groups.back().emplace_back(name, shape);
    group_bytes += bytes;
  }

  Layout layout;
  size_t index = 0;
  for (size_t k = 0; k < groups.size(); ++k) {
    PlannedFile file;
    file.name = groups.size() == 1 ? kHfSingleFile : shard_name(k + 1, groups.size());
    // The header from dtypes and shapes alone (meta tensors hold no data).
    std::vector<std::pair<std::string, at::Tensor>> meta;
    for (const auto& [name, shape] : groups[k])
      meta.emplace_back(hf_name(name), at::empty(shape, at::TensorOptions().dtype(dtype).device(at::kMeta)));
    file.header = encode_safetensors_header(meta, {{"format", "pt"}});
    uint64_t offset = file.header.size();
    for (size_t i = 0; i < groups[k].size(); ++i) {
      PlannedTensor t;
      t.hf = meta[i].first;
      t.shape = groups[k][i].second;
      t.file = k;
      t.begin = offset;
      t.heads = rope_permuted_heads(groups[k][i].first, args);
      t.index = index++;
      offset += static_cast<uint64_t>(t.numel() * elem);
      file.tensors.push_back(t.hf);
      layout.tensors.emplace(groups[k][i].first, std::move(t));
    }
    layout.data_bytes += offset - file.header.size();
    file.size = offset;
    layout.files.push_back(std::move(file));
  }
  return layout;
}

// For each row of a q/k projection in titan's order, its row in HF's:
// interleaved_to_half applied to the row numbers themselves, inverted, so
// that the permutation is defined in one place (the state-dict adapter).
std::vector<int64_t> hf_row_of_titan_row(int64_t rows, int64_t heads) {
  const at::Tensor titan_row_at = interleaved_to_half(at::arange(rows, at::kLong).unsqueeze(1), heads).reshape(-1);
  const auto a = titan_row_at.accessor<int64_t, 1>();
  std::vector<int64_t> out(static_cast<size_t>(rows));
  for (int64_t hf_row = 0; hf_row < rows; ++hf_row) out[static_cast<size_t>(a[hf_row])] = hf_row;
  return out;
}

void check_box(const HfBox& b, const PlannedTensor& p) {
  TITAN_CHECK(b.global_shape == p.shape, "hf save: ", b.fqn, " has shape ", shape_text(b.global_shape),
              ", the model args give ", shape_text(p.shape));
  if (!b.primary) return;  // nothing of it is written here
  TITAN_CHECK(p.shape.size() <= 2, "hf save: ", b.fqn, " has ", p.shape.size(), " dims; Llama 3 tensors have 1 or 2");
  TITAN_CHECK(b.sizes.size() == p.shape.size() && b.offsets.size() == p.shape.size(), "hf save: ", b.fqn,
              "'s box has ", b.sizes.size(), " dims, the tensor ", p.shape.size());
  for (size_t d = 0; d < p.shape.size(); ++d)
    TITAN_CHECK(b.offsets[d] >= 0 && b.sizes[d] >= 0 && b.offsets[d] + b.sizes[d] <= p.shape[d], "hf save: ", b.fqn,
                "'s box [", b.offsets[d], ", +", b.sizes[d], ") leaves the tensor along dim ", d, " (size ", p.shape[d],
                ")");
}

// Writes one box at its place: each row of the box is a contiguous span of
// the file (row-major), and a box that spans whole rows writes each run of
// rows that stays consecutive in the file at once.
void write_box(FileRegionWriter& file, const HfBox& b, const at::Tensor& data_of_box, const PlannedTensor& p,
               at::ScalarType dtype, const std::vector<int64_t>* hf_rows) {
  TITAN_CHECK(data_of_box.sizes().vec() == b.sizes, "hf save: the data of ", b.fqn, "'s box has shape ",
              shape_text(data_of_box.sizes().vec()), ", the box ", shape_text(b.sizes));
  const at::Tensor box = data_of_box.detach().to(at::kCPU, dtype).contiguous();
  const int64_t elem = box.element_size();
  const int64_t tensor_cols = p.shape.size() == 2 ? p.shape[1] : 1;
  const int64_t rows = box.size(0), cols = box.numel() / rows;
  const int64_t row0 = b.offsets[0], col0 = p.shape.size() == 2 ? b.offsets[1] : 0;
  const bool whole_rows = cols == tensor_cols;
  const char* data = static_cast<const char*>(box.data_ptr());
  auto file_row = [&](int64_t r) { return hf_rows ? (*hf_rows)[static_cast<size_t>(row0 + r)] : row0 + r; };
  for (int64_t r = 0; r < rows;) {
    const int64_t first = file_row(r);
    int64_t run = 1;
    while (whole_rows && r + run < rows && file_row(r + run) == first + run) ++run;
    file.write_at(p.begin + static_cast<uint64_t>((first * tensor_cols + col0) * elem), data + r * cols * elem,
                  static_cast<size_t>(run * cols * elem));
    r += run;
  }
}

// Written under a temporary name and renamed, as save_safetensors does.
void write_text_durably(const std::string& path, const std::string& text) {
  write_file_durably(path + ".tmp", text);
  rename_durably(path + ".tmp", path);
}

}  // namespace

void save_hf_shards(const std::string& folder, const ShardedState& shards, const models::llama3::ModelArgs& args,
                    at::ScalarType dtype, const dist::ProcessGroup* group, int64_t max_shard_bytes) {
  std::vector<HfBox> boxes;
  for (const TensorShard& s : shards)
    boxes.push_back({s.fqn, s.global_shape, s.offsets, s.local.defined() ? s.local.sizes().vec() : std::vector<int64_t>{},
                     s.primary && s.numel() > 0});
  save_hf_boxes(folder, boxes, [&](size_t i) { return shards[i].local; }, args, dtype, group, max_shard_bytes);
}

void save_hf_boxes(const std::string& folder, const std::vector<HfBox>& boxes, const HfBoxReader& read,
                   const models::llama3::ModelArgs& args, at::ScalarType dtype, const dist::ProcessGroup* group,
                   int64_t max_shard_bytes) {
  const bool leader = !group || group->rank() == 0;
  const std::string what = "Hugging Face save to " + folder;
  Layout layout;
  std::string config, error;
  // 1. Every rank: the layout, and its boxes checked against it; rank 0
  //    creates the files at their final size under temporary names.
  try {
    config = hf_config_json(args, dtype);  // checks args and dtype first
    layout = plan_layout(args, dtype, max_shard_bytes);
    for (const HfBox& b : boxes) {
      auto p = layout.tensors.find(b.fqn);
      TITAN_CHECK(p != layout.tensors.end(), "hf save: ", b.fqn, " is not a tensor of this Llama 3",
                  args.tie_word_embeddings && b.fqn == "output.weight" ? " (its output is tied to the embedding)" : "");
      check_box(b, p->second);
    }
    if (leader) {
      TITAN_CHECK(files::make_directories(folder), "hf: cannot create folder ", folder);
      for (const PlannedFile& f : layout.files) create_file_of_size(folder + "/" + f.name + ".tmp", f.header, f.size);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(group, error, what);

  // 2. Every rank writes its primary boxes, counting the elements per tensor.
  std::vector<int64_t> written(layout.tensors.size(), 0);
  try {
    std::vector<std::unique_ptr<FileRegionWriter>> open(layout.files.size());
    std::map<std::string, std::vector<int64_t>> permutations;
    for (size_t i = 0; i < boxes.size(); ++i) {
      const HfBox& b = boxes[i];
      if (!b.primary || volume(b.sizes) == 0) continue;
      const PlannedTensor& p = layout.tensors.at(b.fqn);
      auto& file = open[p.file];
      if (!file) file = std::make_unique<FileRegionWriter>(folder + "/" + layout.files[p.file].name + ".tmp");
      const std::vector<int64_t>* hf_rows = nullptr;
      if (p.heads > 0) {
        auto perm = permutations.find(b.fqn);
        if (perm == permutations.end())
          perm = permutations.emplace(b.fqn, hf_row_of_titan_row(p.shape[0], p.heads)).first;
        hf_rows = &perm->second;
      }
      write_box(*file, b, read(i), p, dtype, hf_rows);
      written[p.index] += volume(b.sizes);
    }
    for (auto& file : open)
      if (file) file->close();
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(group, error, what);

  // 3. Together the ranks wrote every element once: a hole would be zeros
  //    in the file, and a layout that saved a replica twice a bug.
  if (group && group->size() > 1) {
    at::Tensor counts = at::tensor(written, at::kLong).to(dist::world().device());
    group->all_reduce(counts);
    counts = counts.cpu();
    std::copy(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + counts.numel(), written.begin());
  }
  for (const auto& [name, p] : layout.tensors) {
    const int64_t n = written[p.index];
    TITAN_CHECK(n == p.numel(), "hf save: the ranks wrote ", n, " of the ", p.numel(), " elements of ", name,
                n < p.numel() ? " (a part no rank holds as primary)" : " (a part saved by two ranks)");
  }

  // 4. Rank 0 completes the folder: the files under their names, the index
  //    (several files), and config.json last.
  try {
    if (leader) {
      for (const PlannedFile& f : layout.files) rename_durably(folder + "/" + f.name + ".tmp", folder + "/" + f.name);
      if (layout.files.size() == 1) {
        std::remove((folder + "/" + kHfIndexFile).c_str());  // a stale index would shadow the new file
      } else {
        nlohmann::json weight_map = nlohmann::json::object();
        for (const PlannedFile& f : layout.files)
          for (const std::string& name : f.tensors) weight_map[name] = f.name;
        const nlohmann::json index = {{"metadata", {{"total_size", layout.data_bytes}}}, {"weight_map", weight_map}};
        write_text_durably(folder + "/" + kHfIndexFile, index.dump(2) + "\n");
        std::remove((folder + "/" + kHfSingleFile).c_str());
      }
      write_text_durably(folder + "/config.json", config);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(group, error, what);
}

}  // namespace titan::checkpoint
