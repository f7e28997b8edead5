#include "titan/checkpoint/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "titan/checkpoint/file_io.hpp"
#include "titan/util/error.hpp"

namespace titan::checkpoint {

namespace {

struct DtypeName {
  at::ScalarType type;
  const char* name;
};

// The dtype spellings of the safetensors spec that LibTorch can hold.
constexpr DtypeName kDtypes[] = {
    {at::kDouble, "F64"}, {at::kFloat, "F32"}, {at::kHalf, "F16"},  {at::kBFloat16, "BF16"},
    {at::kLong, "I64"},   {at::kInt, "I32"},   {at::kShort, "I16"}, {at::kChar, "I8"},
    {at::kByte, "U8"},    {at::kBool, "BOOL"},
};

const char* dtype_name(at::ScalarType t, const std::string& tensor) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.name;
  throw Error("safetensors: tensor '" + tensor + "' has dtype " + std::string(c10::toString(t)) +
              ", which safetensors cannot store");
}

at::ScalarType dtype_from_name(const std::string& name, const std::string& tensor,
                               const std::string& path) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d.type;
  throw Error("safetensors: " + path + ": tensor '" + tensor + "' has unsupported dtype '" + name + "'");
}

// The format is little-endian; so is every machine this project targets
// (x86-64, aarch64). Refuse rather than silently byte-swap wrongly.
void require_little_endian() {
  const uint16_t probe = 1;
  uint8_t first;
  std::memcpy(&first, &probe, 1);
  TITAN_CHECK(first == 1, "safetensors: big-endian hosts are not supported");
}

}  // namespace

std::string safetensors_dtype_name(at::ScalarType dtype, const std::string& tensor) {
  return dtype_name(dtype, tensor);
}

at::ScalarType safetensors_dtype(const std::string& name) { return dtype_from_name(name, "?", "(dtype name)"); }

const at::Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  throw Error("safetensors: no tensor named '" + name + "'");
}

bool SafetensorsFile::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& p) { return p.first == name; });
}

std::string encode_safetensors_header(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                      const std::map<std::string, std::string>& metadata) {
  require_little_endian();
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    TITAN_CHECK(!name.empty() && name != "__metadata__", "safetensors: invalid tensor name '", name, "'");
    TITAN_CHECK(!header.contains(name), "safetensors: tensor name '", name, "' appears twice");
    TITAN_CHECK(tensor.defined(), "safetensors: tensor '", name, "' is undefined");
    const uint64_t bytes = static_cast<uint64_t>(tensor.numel()) * tensor.element_size();
    header[name] = {{"dtype", dtype_name(tensor.scalar_type(), name)},
                    {"shape", tensor.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  // Pad with spaces so the data starts 8-byte aligned (what the reference
  // implementation does; lets readers map tensors in place).
  text.append((8 - (text.size() % 8)) % 8, ' ');
  const uint64_t header_len = text.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &header_len, 8);
  return out + text;
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, at::Tensor>> cpu;
  cpu.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    TITAN_CHECK(tensor.defined(), "safetensors: tensor '", name, "' is undefined");
    cpu.emplace_back(name, tensor.detach().to(at::kCPU).contiguous());
  }
  // Written under a temporary name and renamed: a crash never leaves a
  // torn file under the final name.
  const std::string tmp = path + ".tmp";
  write_safetensors_durably(tmp, cpu, metadata);
  rename_durably(tmp, path);
}

SafetensorsWritten write_safetensors_durably(const std::string& path,
                                             const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                             const std::map<std::string, std::string>& metadata) {
  for (const auto& [name, t] : tensors)
    TITAN_CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous(), "safetensors: tensor '", name,
                "' must be a contiguous CPU tensor to be written");
  return write_safetensors_streamed(path, tensors, [&](size_t i) { return tensors[i].second; }, metadata);
}

SafetensorsWritten write_safetensors_streamed(const std::string& path,
                                              const std::vector<std::pair<std::string, at::Tensor>>& layout,
                                              const std::function<at::Tensor(size_t)>& data,
                                              const std::map<std::string, std::string>& metadata) {
  const std::string header = encode_safetensors_header(layout, metadata);
  DurableFile out(path);
  out.write(header.data(), header.size());
  for (size_t i = 0; i < layout.size(); ++i) {
    const auto& [name, planned] = layout[i];
    const at::Tensor t = data(i).detach().to(at::kCPU).contiguous();
    TITAN_CHECK(t.scalar_type() == planned.scalar_type() && t.sizes() == planned.sizes(), "safetensors: tensor '",
                name, "' has dtype ", c10::toString(t.scalar_type()), " and ", t.sizes().size(),
                " dims of sizes ", t.sizes(), ", its header entry ", c10::toString(planned.scalar_type()), " and ",
                planned.sizes());
    out.write(t.data_ptr(), static_cast<size_t>(t.numel() * t.element_size()));
  }
  out.close();
  return {out.bytes_written(), out.crc32()};
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  require_little_endian();
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  TITAN_CHECK(in.good(), "safetensors: cannot open ", path);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  TITAN_CHECK(file_size >= 8, "safetensors: ", path, " is too short (", file_size, " bytes) to be a safetensors file");
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  TITAN_CHECK(header_len <= file_size - 8, "safetensors: ", path, ": its length field (bytes 0-7) claims a ",
              header_len, "-byte header but only ", file_size - 8, " bytes follow it");
  std::string text(header_len, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_len));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("safetensors: " + path + ": header is not valid JSON (" + e.what() + ")");
  }
  TITAN_CHECK(header.is_object(), "safetensors: ", path, ": header is not a JSON object");
  SafetensorsHeader result;
  result.data_start = 8 + header_len;
  result.file_size = file_size;
  const uint64_t data_size = file_size - result.data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      TITAN_CHECK(entry.is_object(), "safetensors: ", path, ": __metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        TITAN_CHECK(v.is_string(), "safetensors: ", path, ": metadata '", k, "' is not a string");
        result.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    try {
      SafetensorsEntry e;
      e.dtype = dtype_from_name(entry.at("dtype").get<std::string>(), name, path);
      e.shape = entry.at("shape").get<std::vector<int64_t>>();
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      TITAN_CHECK(offsets.size() == 2 && offsets[0] <= offsets[1] && offsets[1] <= data_size,
                  "safetensors: ", path, ": tensor '", name, "' has data_offsets outside the ",
                  data_size, "-byte data section");
      uint64_t numel = 1;
      for (int64_t d : e.shape) {
        TITAN_CHECK(d >= 0, "safetensors: ", path, ": tensor '", name, "' has a negative dimension");
        numel *= static_cast<uint64_t>(d);
      }
      const uint64_t bytes = numel * c10::elementSize(e.dtype);
      TITAN_CHECK(offsets[1] - offsets[0] == bytes, "safetensors: ", path, ": tensor '", name,
                  "' has ", offsets[1] - offsets[0], " bytes but its shape and dtype need ", bytes);
      e.begin = result.data_start + offsets[0];
      e.end = result.data_start + offsets[1];
      result.entries.emplace(name, std::move(e));
    } catch (const nlohmann::json::exception& e) {
      throw Error("safetensors: " + path + ": tensor '" + name + "' has a malformed entry (" + e.what() + ")");
    }
  }
  return result;
}

at::Tensor read_safetensors_tensor(const std::string& path, const SafetensorsEntry& entry) {
  at::Tensor t = at::empty(entry.shape, at::TensorOptions().dtype(entry.dtype));
  const uint64_t bytes = entry.end - entry.begin;
  if (bytes == 0) return t;
  std::ifstream in(path, std::ios::binary);
  TITAN_CHECK(in.good(), "safetensors: cannot open ", path);
  in.seekg(static_cast<std::streamoff>(entry.begin));
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(bytes));
  TITAN_CHECK(in.good(), "safetensors: ", path, ": read of ", bytes, " bytes at offset ", entry.begin,
              " failed (truncated?)");
  return t;
}

at::Tensor read_safetensors_rows(const std::string& path, const SafetensorsEntry& entry, int64_t row_begin,
                                 int64_t rows) {
  const int64_t total_rows = entry.shape.empty() ? 1 : entry.shape[0];
  TITAN_CHECK(row_begin >= 0 && rows >= 0 && row_begin + rows <= total_rows, "safetensors: ", path, ": rows [",
              row_begin, ", ", row_begin + rows, ") of a tensor with ", total_rows);
  if (entry.shape.empty() || (row_begin == 0 && rows == total_rows)) return read_safetensors_tensor(path, entry);
  std::vector<int64_t> shape = entry.shape;
  shape[0] = rows;
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(entry.dtype));
  const uint64_t row_bytes = total_rows == 0 ? 0 : (entry.end - entry.begin) / static_cast<uint64_t>(total_rows);
  const uint64_t bytes = row_bytes * static_cast<uint64_t>(rows);
  if (bytes == 0) return t;
  const uint64_t offset = entry.begin + row_bytes * static_cast<uint64_t>(row_begin);
  std::ifstream in(path, std::ios::binary);
  TITAN_CHECK(in.good(), "safetensors: cannot open ", path);
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(bytes));
  TITAN_CHECK(in.good(), "safetensors: ", path, ": read of ", bytes, " bytes at offset ", offset,
              " failed (truncated?)");
  return t;
}

SafetensorsFile load_safetensors(const std::string& path) {
  const SafetensorsHeader header = read_safetensors_header(path);
  SafetensorsFile result;
  result.metadata = header.metadata;
  std::vector<std::pair<uint64_t, std::string>> by_offset;
  for (const auto& [name, e] : header.entries) by_offset.emplace_back(e.begin, name);
  // File order, which is the order the writer chose (nlohmann sorts keys).
  std::stable_sort(by_offset.begin(), by_offset.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [offset, name] : by_offset)
    result.tensors.emplace_back(name, read_safetensors_tensor(path, header.entries.at(name)));
  return result;
}

}  // namespace titan::checkpoint
