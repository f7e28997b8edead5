#pragma once
/// @file
/// @brief Reading and writing the safetensors format (Hugging Face's weight
/// files): the interchange format with Python and with HF checkpoints.
///
/// Layout: an 8-byte little-endian header length N; N bytes of JSON
/// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
/// optional "__metadata__": {string: string}}, padded with spaces; then the
/// raw little-endian bytes, offsets relative to the end of the header.

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace titan::checkpoint {

/// @brief Tensors by name, in file (or insertion) order, plus the metadata.
struct SafetensorsFile {
  std::vector<std::pair<std::string, at::Tensor>> tensors;  ///< CPU, contiguous
  std::map<std::string, std::string> metadata;              ///< "__metadata__", if any

  /// The tensor called `name`; throws titan::Error naming it if absent.
  const at::Tensor& at(const std::string& name) const;
  /// Whether a tensor called `name` is present.
  bool contains(const std::string& name) const;
};

/// @brief Writes `tensors` (any device; copied to the CPU, made contiguous) to
/// `path`. Supported dtypes: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL.
/// Writes to path + ".tmp" and renames, so a crash never leaves a torn file
/// under the final name. Throws titan::Error naming the file or tensor.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// @brief The safetensors spelling of `dtype` ("F32", "BF16", ...); throws
/// titan::Error naming `tensor` for a dtype the format cannot hold.
std::string safetensors_dtype_name(at::ScalarType dtype, const std::string& tensor = "");
/// @brief The dtype of a safetensors spelling; throws titan::Error.
at::ScalarType safetensors_dtype(const std::string& name);

/// @brief Where one tensor lies in a safetensors file.
struct SafetensorsEntry {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  ///< absolute file offset of the first byte
  uint64_t end = 0;    ///< one past the last byte
};

/// @brief A safetensors file's header, parsed and checked against the file size.
struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;  ///< "__metadata__", if any
  uint64_t data_start = 0;                      ///< 8 + header length
  uint64_t file_size = 0;
};

/// @brief The header bytes (8-byte length, then the JSON padded to an
/// 8-byte boundary) for `tensors` laid out back to back in the given order.
/// Only dtypes and shapes are read. Throws titan::Error on a bad name or dtype.
std::string encode_safetensors_header(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                      const std::map<std::string, std::string>& metadata = {});

/// @brief Reads and checks only the header of `path` (no tensor data): a
/// truncated file, bad JSON, unknown dtype or offsets outside the file is a
/// one-line titan::Error naming the file (and tensor).
SafetensorsHeader read_safetensors_header(const std::string& path);

/// @brief Reads one tensor that `read_safetensors_header(path)` listed.
at::Tensor read_safetensors_tensor(const std::string& path, const SafetensorsEntry& entry);

/// @brief Reads rows [row_begin, row_begin + rows) along dim 0 of the
/// tensor `entry` describes (a 0-d tensor has one row): one contiguous
/// span of the file, so a rank loading its shard of a larger saved box
/// holds that shard's rows, not the whole box. Throws titan::Error for a
/// range outside the tensor or a short read.
at::Tensor read_safetensors_rows(const std::string& path, const SafetensorsEntry& entry, int64_t row_begin,
                                 int64_t rows);

/// @brief What write_safetensors_durably wrote.
struct SafetensorsWritten {
  uint64_t bytes = 0;  ///< file size
  uint32_t crc32 = 0;  ///< CRC-32 of the whole file
};

/// @brief Writes `tensors` (CPU, contiguous) to `path` itself, fsync'ed
/// (no temporary name: for files inside a folder that is renamed as a
/// whole, like a checkpoint's). Throws titan::Error naming the file.
SafetensorsWritten write_safetensors_durably(const std::string& path,
                                             const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                             const std::map<std::string, std::string>& metadata = {});

/// @brief write_safetensors_durably with each tensor's data asked for when
/// its turn comes: `layout` gives the names, dtypes and shapes (meta
/// tensors will do) for the header, `data(i)` tensor i's values (any
/// device; copied to the CPU, written, dropped), so that the file's
/// tensors are never all in host memory at once. Data that disagrees with
/// the layout is a titan::Error naming the tensor.
SafetensorsWritten write_safetensors_streamed(const std::string& path,
                                              const std::vector<std::pair<std::string, at::Tensor>>& layout,
                                              const std::function<at::Tensor(size_t)>& data,
                                              const std::map<std::string, std::string>& metadata = {});

/// @brief Reads a whole safetensors file into CPU tensors. A truncated file,
/// bad JSON, unknown dtype or out-of-range offsets is a one-line titan::Error
/// naming the file (and tensor).
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace titan::checkpoint
