// The checkpoint folder format: rank files, metadata.json, listing and
// pruning, and the resharding load (see dcp.hpp for the layout).
#include "titan/checkpoint/dcp.hpp"

#include <ATen/ATen.h>
#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>

#include "titan/checkpoint/file_io.hpp"
#include "titan/checkpoint/safetensors.hpp"
#include "titan/checkpoint/tensor_stream.hpp"
#include "titan/util/files.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/dist/world.hpp"
#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"
#include "titan/util/strings.hpp"

namespace titan::checkpoint {

namespace {

namespace files = titan::files;


// "step-12" -> 12; anything else (step-12.partial, notes) -> nullopt.
std::optional<int64_t> parse_step_name(const std::string& name, const std::string& suffix = "") {
  if (name.rfind("step-", 0) != 0 || name.size() <= 5 + suffix.size()) return std::nullopt;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return std::nullopt;
  const std::string digits = name.substr(5, name.size() - 5 - suffix.size());
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return std::nullopt;
  return std::stoll(digits);
}

std::vector<std::string> folder_entries(const std::string& folder) {
  std::vector<std::string> names;
  DIR* d = ::opendir(folder.c_str());
  if (!d) return names;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// The part of box (off, len) that lies in box (other_off, other_len), as
// (begin, length) per dim; empty when they do not meet.
std::optional<std::vector<std::pair<int64_t, int64_t>>> intersect(const std::vector<int64_t>& a_off,
                                                                  const std::vector<int64_t>& a_len,
                                                                  const std::vector<int64_t>& b_off,
                                                                  const std::vector<int64_t>& b_len) {
  std::vector<std::pair<int64_t, int64_t>> box;
  for (size_t d = 0; d < a_off.size(); ++d) {
    const int64_t lo = std::max(a_off[d], b_off[d]);
    const int64_t hi = std::min(a_off[d] + a_len[d], b_off[d] + b_len[d]);
    if (hi <= lo) return std::nullopt;
    box.emplace_back(lo, hi - lo);
  }
  return box;
}

int64_t volume(const std::vector<std::pair<int64_t, int64_t>>& box) {
  int64_t v = 1;
  for (const auto& [b, l] : box) v *= l;
  return v;
}

at::Tensor slice_box(at::Tensor t, const std::vector<int64_t>& t_off,
                     const std::vector<std::pair<int64_t, int64_t>>& box) {
  for (size_t d = 0; d < box.size(); ++d)
    t = t.narrow(static_cast<int64_t>(d), box[d].first - t_off[d], box[d].second);
  return t;
}

}  // namespace

std::string step_folder_name(int64_t step) { return "step-" + std::to_string(step); }

std::string rank_file_name(int rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "rank-%05d.safetensors", rank);
  return buf;
}

nlohmann::json RankFile::to_json() const {
  return {{"rank", rank}, {"file", file}, {"bytes", bytes}, {"crc32", crc32}, {"tensors", tensors}};
}

RankFile RankFile::from_json(const nlohmann::json& j) {
  RankFile r;
  r.rank = j.at("rank").get<int>();
  r.file = j.at("file").get<std::string>();
  r.bytes = j.at("bytes").get<uint64_t>();
  r.crc32 = j.at("crc32").get<uint32_t>();
  r.tensors = j.at("tensors");
  return r;
}

namespace {

// Where `fqn` lies in the checkpoint's `file`: the file's header parsed once
// per CheckpointInfo (and its copies), however many tensors are read from it.
const SafetensorsEntry& saved_entry(const CheckpointInfo& ckpt, const std::string& file, const std::string& fqn) {
  auto h = ckpt.headers->find(file);
  if (h == ckpt.headers->end()) h = ckpt.headers->emplace(file, read_safetensors_header(ckpt.dir + "/" + file)).first;
  auto e = h->second.entries.find(fqn);
  TITAN_CHECK(e != h->second.entries.end(), "checkpoint: ", ckpt.dir, "/", file, " has no tensor ", fqn);
  return e->second;
}

// write_rank_file with each primary box's values from `value_of(box)`
// (its sizes; any device and dtype), asked for when its turn comes.
RankFile write_rank_file_of(const std::string& dir, int rank, const ShardedState& shards,
                            std::optional<at::ScalarType> dtype,
                            const std::function<at::Tensor(const TensorShard&)>& value_of) {
  RankFile result;
  result.rank = rank;
  // The header from dtypes and shapes (meta tensors), then each box copied
  // to the host as its turn comes: a GPU rank's save holds one box in host
  // memory at a time, not a host copy of all it saves.
  std::vector<std::pair<std::string, at::Tensor>> layout;
  std::vector<const TensorShard*> saved;
  nlohmann::json sharding = nlohmann::json::object();
  for (const TensorShard& s : shards) {
    if (!s.primary || s.numel() == 0) continue;
    TITAN_CHECK(!result.tensors.contains(s.fqn), "checkpoint: tensor ", s.fqn, " appears twice on rank ", rank);
    const at::ScalarType written_as = dtype.value_or(s.local.scalar_type());
    layout.emplace_back(s.fqn, at::empty(s.local.sizes(), at::TensorOptions().dtype(written_as).device(at::kMeta)));
    saved.push_back(&s);
    // The key torch's HuggingFaceStorageReader reads a box's place from.
    sharding[s.fqn] = {{"saved_offsets", s.offsets}};
    result.tensors[s.fqn] = {{"dtype", safetensors_dtype_name(written_as, s.fqn)},
                             {"shape", s.global_shape},
                             {"offsets", s.offsets},
                             {"lengths", s.local.sizes().vec()}};
  }
  if (layout.empty()) return result;
  result.file = rank_file_name(rank);
  const SafetensorsWritten written =
      write_safetensors_streamed(dir + "/" + result.file, layout,
                                 [&](size_t i) { return value_of(*saved[i]).to(at::kCPU, layout[i].second.scalar_type()); },
                                 {{"format", "pt"}, {"DCP_SHARDING_INFO", sharding.dump()}});
  result.bytes = written.bytes;
  result.crc32 = written.crc32;
  return result;
}

}  // namespace

RankFile write_rank_file(const std::string& dir, int rank, const ShardedState& shards,
                         std::optional<at::ScalarType> dtype) {
  return write_rank_file_of(dir, rank, shards, dtype, [](const TensorShard& s) { return s.local.detach(); });
}

void finalize_checkpoint(const std::string& partial_dir, const std::string& final_dir, int64_t step,
                         const std::vector<RankFile>& files, const nlohmann::json& state) {
  nlohmann::json file_index = nlohmann::json::object();
  nlohmann::json tensors = nlohmann::json::object();
  for (const RankFile& f : files) {
    if (f.file.empty()) continue;
    file_index[f.file] = {{"rank", f.rank}, {"bytes", f.bytes}, {"crc32", f.crc32}};
    for (const auto& [fqn, box] : f.tensors.items()) {
      nlohmann::json& entry = tensors[fqn];
      if (entry.is_null()) {
        entry = {{"dtype", box.at("dtype")}, {"shape", box.at("shape")}, {"chunks", nlohmann::json::array()}};
      } else {
        TITAN_CHECK(entry.at("dtype") == box.at("dtype") && entry.at("shape") == box.at("shape"), "checkpoint: ",
                    fqn, " was saved with different shapes or dtypes by different ranks");
      }
      const auto off = box.at("offsets").get<std::vector<int64_t>>();
      const auto len = box.at("lengths").get<std::vector<int64_t>>();
      for (const auto& c : entry["chunks"])
        TITAN_CHECK(!intersect(off, len, c.at("offsets").get<std::vector<int64_t>>(),
                               c.at("lengths").get<std::vector<int64_t>>()),
                    "checkpoint: ranks ", c.at("rank").get<int>(), " and ", f.rank, " both saved part of ", fqn,
                    " (replicas must save once)");
      entry["chunks"].push_back({{"file", f.file}, {"rank", f.rank}, {"offsets", off}, {"lengths", len}});
    }
  }
  nlohmann::json meta = {{"format", "titan.cpp distributed checkpoint"},
                         {"version", kFormatVersion},
                         {"step", step},
                         {"files", file_index},
                         {"tensors", tensors},
                         {"state", state}};
  write_file_durably(partial_dir + "/" + kMetadataFile, meta.dump(1));
  publish_folder(partial_dir, final_dir);
}

void publish_folder(const std::string& partial_dir, const std::string& final_dir) {
  fsync_directory(partial_dir);
  // A folder of the same name (a re-save of a step) moves aside first:
  // rename() cannot replace a non-empty folder.
  const std::string old = final_dir + ".old";
  const bool replacing = files::exists(final_dir);
  if (replacing) {
    files::remove_all(old);
    rename_durably(final_dir, old);
  }
  rename_durably(partial_dir, final_dir);
  if (replacing) files::remove_all(old);
}

std::vector<int64_t> list_checkpoints(const std::string& folder) {
  std::vector<int64_t> steps;
  for (const std::string& name : folder_entries(folder)) {
    const auto step = parse_step_name(name);
    if (step && files::is_regular_file(folder + "/" + name + "/" + kMetadataFile)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

namespace {

// Whether a complete checkpoint can be resumed from. An unreadable one
// counts as not resumable: the loader would refuse it too.
bool holds_full_state(const std::string& dir) {
  try {
    return open_checkpoint(dir).full_state();
  } catch (const std::exception&) {
    return false;
  }
}

// metadata.json goes first: a removal cut short by a kill leaves a folder the
// loader ignores (no metadata), never one that looks complete but lacks files.
void remove_checkpoint(const std::string& dir) {
  std::remove((dir + "/" + kMetadataFile).c_str());
  fsync_directory(dir);
  files::remove_all(dir);
}

}  // namespace

void prune_checkpoints(const std::string& folder, int64_t keep, int64_t newest) {
  if (keep > 0) {
    const std::vector<int64_t> steps = list_checkpoints(folder);
    // The newest full checkpoint stays even when weights-only saves after it
    // (a final model_weights_only export) push it out of the latest `keep`:
    // it is the last state training can resume from.
    std::optional<int64_t> resumable;
    for (auto it = steps.rbegin(); it != steps.rend() && !resumable; ++it)
      if (holds_full_state(folder + "/" + step_folder_name(*it))) resumable = *it;
    for (size_t i = 0; i + static_cast<size_t>(keep) < steps.size(); ++i)
      if (steps[i] != resumable) remove_checkpoint(folder + "/" + step_folder_name(steps[i]));
  }
  // Left by a save that died (its step is older than the one just completed).
  for (const std::string& name : folder_entries(folder)) {
    const auto step = parse_step_name(name, ".partial");
    if (step && *step < newest) files::remove_all(folder + "/" + name);
  }
}

bool CheckpointInfo::has_tensor(const std::string& fqn) const { return metadata.at("tensors").contains(fqn); }

bool CheckpointInfo::full_state() const {
  const auto state = metadata.find("state");
  return state != metadata.end() && state->is_object() && state->value("content", "") == "full";
}

std::vector<int64_t> CheckpointInfo::shape_of(const std::string& fqn) const {
  TITAN_CHECK(has_tensor(fqn), "checkpoint ", dir, " has no tensor ", fqn);
  return metadata.at("tensors").at(fqn).at("shape").get<std::vector<int64_t>>();
}

namespace {

// Every field of metadata.json a load reads, checked once where the file is
// opened: a hand-edited or corrupted file is one error naming it, not a JSON
// library message from the middle of a load, and no size read from it can
// ask for more memory than the files it lists hold.
void check_metadata(const nlohmann::json& meta, const std::string& path) {
  auto fail = [&](const std::string& what) { throw Error("checkpoint: " + path + ": " + what); };
  // Names come from the file: quoted and escaped, so that a newline or a
  // stray byte in one cannot break the one-line message.
  auto safe_dump = [](const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  auto quoted = [&](const std::string& name) { return safe_dump(nlohmann::json(name)); };
  auto count = [&](const nlohmann::json& v, const std::string& what) -> int64_t {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) fail(what + " is not a count (" + safe_dump(v) + ")");
    return v.get<int64_t>();
  };
  const nlohmann::json& files_json = meta.at("files");
  const nlohmann::json& tensors = meta.at("tensors");
  if (!files_json.is_object()) fail("\"files\" is not an object");
  if (!tensors.is_object()) fail("\"tensors\" is not an object");
  std::map<std::string, int64_t> file_bytes;
  for (const auto& [name, rec] : files_json.items()) {
    if (!rec.is_object() || !rec.contains("bytes") || !rec.contains("crc32"))
      fail("file " + quoted(name) + " has no bytes and crc32");
    file_bytes[name] = count(rec.at("bytes"), "the size of " + quoted(name));
    if (count(rec.at("crc32"), "the CRC-32 of " + quoted(name)) > 0xffffffffLL)
      fail("the CRC-32 of " + quoted(name) + " is not 32-bit");
  }
  for (const auto& [fqn, entry] : tensors.items()) {
    const std::string t = "tensor " + quoted(fqn);
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("chunks"))
      fail(t + " has no dtype, shape and chunks");
    if (!entry.at("dtype").is_string()) fail(t + ": its dtype is not a string");
    int64_t element = 0;
    try {
      element = static_cast<int64_t>(c10::elementSize(safetensors_dtype(entry.at("dtype").get<std::string>())));
    } catch (const Error&) {
      fail(t + " has the unsupported dtype " + safe_dump(entry.at("dtype")));
    }
    const nlohmann::json& shape_json = entry.at("shape");
    if (!shape_json.is_array() || shape_json.size() > 16) fail(t + ": its shape is not a list of at most 16 sizes");
    std::vector<int64_t> shape;
    int64_t numel = 1;
    for (const auto& d : shape_json) {
      shape.push_back(count(d, t + "'s shape"));
      if (shape.back() > 0 && numel > (int64_t{1} << 50) / shape.back()) fail(t + "'s shape " + safe_dump(shape_json) + " is too large");
      numel *= shape.back();
    }
    if (!entry.at("chunks").is_array()) fail(t + ": its chunks are not a list");
    int64_t saved = 0;
    for (const auto& c : entry.at("chunks")) {
      if (!c.is_object() || !c.contains("file") || !c.contains("offsets") || !c.contains("lengths") ||
          !c.at("file").is_string() || !c.at("offsets").is_array() || !c.at("lengths").is_array())
        fail(t + " has a chunk without file, offsets and lengths");
      const std::string file = c.at("file").get<std::string>();
      if (!file_bytes.count(file)) fail(t + " has a chunk in " + quoted(file) + ", which \"files\" does not list");
      if (c.at("offsets").size() != shape.size() || c.at("lengths").size() != shape.size())
        fail(t + " has a chunk whose offsets or lengths do not match its " + std::to_string(shape.size()) + " dims");
      int64_t volume = 1;
      for (size_t d = 0; d < shape.size(); ++d) {
        const int64_t off = count(c.at("offsets")[d], t + "'s chunk offset");
        const int64_t len = count(c.at("lengths")[d], t + "'s chunk length");
        if (off > shape[d] || len > shape[d] - off) fail(t + " has a chunk outside its shape " + safe_dump(shape_json));
        volume *= len;
      }
      if (volume * element > file_bytes.at(file)) fail(t + " has a chunk larger than its file " + quoted(file));
      saved += volume;
    }
    if (saved > numel) fail(t + "'s chunks hold " + std::to_string(saved) + " elements, more than its " +
                            std::to_string(numel));
  }
}

}  // namespace

CheckpointInfo open_checkpoint(const std::string& dir) {
  TITAN_CHECK(files::is_directory(dir), "checkpoint: ", dir, " is not a folder");
  const std::string meta_path = dir + "/" + kMetadataFile;
  TITAN_CHECK(files::is_regular_file(meta_path), "checkpoint: ", dir, " has no ", kMetadataFile,
              " (an incomplete save, or not a titan checkpoint)");
  CheckpointInfo info;
  info.dir = dir;
  try {
    info.metadata = nlohmann::json::parse(read_text_file(meta_path));
    TITAN_CHECK(info.metadata.value("version", -1) == kFormatVersion, "checkpoint: ", meta_path,
                " has format version ", info.metadata.value("version", -1), "; this build reads version ",
                kFormatVersion);
    info.step = info.metadata.at("step").get<int64_t>();
    check_metadata(info.metadata, meta_path);
  } catch (const nlohmann::json::exception& e) {
    throw Error("checkpoint: " + meta_path + " is not a valid titan metadata file (" + e.what() + ")");
  }
  return info;
}

void agree_on_errors(const dist::ProcessGroup* group, const std::string& my_error, const std::string& what) {
  if (!group || group->size() == 1) {
    if (!my_error.empty()) throw Error(my_error);
    return;
  }
  at::Tensor flags = at::zeros({group->size()}, at::TensorOptions().dtype(at::kInt));
  if (!my_error.empty()) flags[group->rank()] = 1;
  at::Tensor on_device = flags.to(dist::world().device());
  group->all_reduce(on_device);
  flags = on_device.cpu();
  for (int r = 0; r < group->size(); ++r) {
    if (flags[r].item<int>() == 0) continue;
    if (!my_error.empty()) throw Error(my_error);
    throw Error(what + " failed on rank " + std::to_string(group->global_ranks()[static_cast<size_t>(r)]) +
                " (its error is in its log); stopping");
  }
}

namespace {

void check_checkpoint_files(const CheckpointInfo& ckpt, const std::set<std::string>& names) {
  for (const std::string& file : names) {
    const std::string path = ckpt.dir + "/" + file;
    TITAN_CHECK(ckpt.metadata.at("files").contains(file), "checkpoint ", ckpt.dir, ": ", file, " is not listed in ",
                kMetadataFile);
    const nlohmann::json& rec = ckpt.metadata.at("files").at(file);
    const int64_t size = file_size(path);
    TITAN_CHECK(size >= 0, "checkpoint: ", path, " is missing");
    TITAN_CHECK(static_cast<uint64_t>(size) == rec.at("bytes").get<uint64_t>(), "checkpoint: ", path, " has ", size,
                " bytes, ", kMetadataFile, " records ", rec.at("bytes").get<uint64_t>(), " (truncated?)");
    TITAN_CHECK(file_crc32(path) == rec.at("crc32").get<uint32_t>(), "checkpoint: ", path,
                " fails its CRC-32 check (the file is corrupted)");
  }
}

}  // namespace

void load_shards(const CheckpointInfo& ckpt, ShardedState& targets, const dist::ProcessGroup* group,
                 bool check_files) {
  struct Piece {
    size_t target;
    std::string file, fqn;
    std::vector<int64_t> offsets;
    std::vector<std::pair<int64_t, int64_t>> box;
  };
  std::vector<Piece> pieces;
  std::set<std::string> needed;
  std::string error;
  try {
    const nlohmann::json& index = ckpt.metadata.at("tensors");
    for (size_t i = 0; i < targets.size(); ++i) {
      const TensorShard& t = targets[i];
      TITAN_CHECK(index.contains(t.fqn), "checkpoint ", ckpt.dir, " has no tensor ", t.fqn,
                  " (saved from another model or flavor, or a weights-only checkpoint?)");
      const nlohmann::json& entry = index.at(t.fqn);
      const auto shape = entry.at("shape").get<std::vector<int64_t>>();
      TITAN_CHECK(shape == t.global_shape, "checkpoint ", ckpt.dir, ": ", t.fqn, " was saved with shape ",
                  shape_text(shape), ", the model has ", shape_text(t.global_shape), " (another flavor?)");
      if (t.numel() == 0) continue;
      const std::vector<int64_t> lengths = t.local.sizes().vec();
      int64_t covered = 0;
      for (const auto& c : entry.at("chunks")) {
        const auto c_off = c.at("offsets").get<std::vector<int64_t>>();
        auto box = intersect(t.offsets, lengths, c_off, c.at("lengths").get<std::vector<int64_t>>());
        if (!box) continue;
        covered += volume(*box);
        pieces.push_back({i, c.at("file").get<std::string>(), t.fqn, c_off, *box});
        needed.insert(pieces.back().file);
      }
      TITAN_CHECK(covered == t.numel(), "checkpoint ", ckpt.dir, ": the saved parts of ", t.fqn, " cover ",
                  covered, " of the ", t.numel(), " elements this rank needs (an incomplete save?)");
    }
    // Every file this rank reads is checked whole before anything is
    // loaded, so that a torn or corrupted file cannot half-load a model.
    if (check_files) check_checkpoint_files(ckpt, needed);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(group, error, "checkpoint load");

  try {
    at::NoGradGuard no_grad;
    for (const Piece& p : pieces) {
      const std::string path = ckpt.dir + "/" + p.file;
      const SafetensorsEntry& entry = saved_entry(ckpt, p.file, p.fqn);
      // Only the rows of the saved box this piece needs are read (one
      // contiguous span): a rank loading its shard of a checkpoint saved by
      // fewer ranks (a one-process seed: whole tensors) holds its own rows,
      // not the whole parameter. A cut along another dim (TP's column-wise
      // split of wo and w2) still reads whole rows of the piece, at most tp
      // times the piece.
      std::vector<int64_t> rows_offsets = p.offsets;
      at::Tensor saved;
      if (p.box.empty()) {
        saved = read_safetensors_tensor(path, entry);
      } else {
        saved = read_safetensors_rows(path, entry, p.box[0].first - p.offsets[0], p.box[0].second);
        rows_offsets[0] = p.box[0].first;
      }
      TensorShard& t = targets[p.target];
      slice_box(t.local, t.offsets, p.box).copy_(slice_box(saved, rows_offsets, p.box));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(group, error, "checkpoint load");
}

std::map<std::string, SavedTensor> model_tensor_index(const CheckpointInfo& ckpt) {
  std::map<std::string, SavedTensor> out;
  for (const auto& [fqn, entry] : ckpt.metadata.at("tensors").items()) {
    if (fqn.rfind("optimizer.", 0) == 0) continue;
    SavedTensor t;
    t.shape = entry.at("shape").get<std::vector<int64_t>>();
    t.dtype = safetensors_dtype(entry.at("dtype").get<std::string>());
    // Whole tensors: their chunks must cover them (open_checkpoint checked
    // that they are inside and no larger than their files) before any
    // memory is taken for one.
    int64_t numel = 1, saved = 0;
    for (int64_t d : t.shape) numel *= d;
    for (const auto& c : entry.at("chunks")) {
      int64_t v = 1;
      for (const auto& len : c.at("lengths")) v *= len.get<int64_t>();
      saved += v;
    }
    TITAN_CHECK(saved == numel, "checkpoint ", ckpt.dir, ": the saved parts of ", fqn, " cover ", saved, " of its ",
                numel, " elements (an incomplete save?)");
    out.emplace(fqn, std::move(t));
  }
  return out;
}

void check_checkpoint_files(const CheckpointInfo& ckpt) {
  std::set<std::string> names;
  for (const auto& [file, rec] : ckpt.metadata.at("files").items()) names.insert(file);
  check_checkpoint_files(ckpt, names);
}

at::Tensor read_model_tensor(const CheckpointInfo& ckpt, const std::string& fqn, const SavedTensor& saved) {
  // Saved whole by one rank (a seed, a converted or a one-process
  // checkpoint): the saved tensor is the answer, read once, with no target
  // to copy it into (which would hold it twice).
  const nlohmann::json& chunks = ckpt.metadata.at("tensors").at(fqn).at("chunks");
  if (chunks.size() == 1 && chunks[0].at("lengths").get<std::vector<int64_t>>() == saved.shape) {
    const std::string file = chunks[0].at("file").get<std::string>();
    const SafetensorsEntry& entry = saved_entry(ckpt, file, fqn);
    TITAN_CHECK(entry.shape == saved.shape && entry.dtype == saved.dtype, "checkpoint: ", ckpt.dir, "/", file, ": ",
                fqn, " is not what metadata.json says it is (shape or dtype)");
    return read_safetensors_tensor(ckpt.dir + "/" + file, entry);
  }
  ShardedState target(1);
  target[0].fqn = fqn;
  target[0].global_shape = saved.shape;
  target[0].offsets.assign(saved.shape.size(), 0);
  target[0].local = at::empty(saved.shape, at::TensorOptions().dtype(saved.dtype));
  load_shards(ckpt, target, nullptr, /*check_files=*/false);
  return target[0].local;
}

std::map<std::string, at::Tensor> read_model_tensors(const std::string& dir) {
  return checkpoint_stream(open_checkpoint(dir)).read_all();
}

void write_model_checkpoint(const std::string& dir, const std::map<std::string, at::Tensor>& tensors, int64_t step) {
  write_model_checkpoint(dir, stream_of(tensors), step);
}

void write_model_checkpoint(const std::string& dir, const TensorStream& tensors, int64_t step) {
  const std::string partial = dir + ".partial";
  files::remove_all(partial);
  TITAN_CHECK(files::make_directories(partial), "checkpoint: cannot create ", partial);
  ShardedState shards;  // whole boxes of meta tensors: the header's shapes and dtypes
  for (const auto& [fqn, t] : tensors.layout) {
    TensorShard s;
    s.fqn = fqn;
    s.local = t;
    s.global_shape = t.sizes().vec();
    s.offsets.assign(s.global_shape.size(), 0);
    shards.push_back(std::move(s));
  }
  const RankFile file = write_rank_file_of(partial, 0, shards, std::nullopt, [&](const TensorShard& s) {
    at::Tensor value = tensors.read(s.fqn);
    TITAN_INTERNAL_ASSERT(value.sizes() == s.local.sizes(), "checkpoint: ", s.fqn, " was read with shape ",
                          value.sizes(), ", its layout says ", s.local.sizes());
    return value;
  });
  nlohmann::json state = {{"content", "model"}, {"train_state", {{"step", step}}}};
  finalize_checkpoint(partial, dir, step, {file}, state);
}

}  // namespace titan::checkpoint
