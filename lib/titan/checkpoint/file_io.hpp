#pragma once
/// @file
/// @brief Durable file writing and checked reading for checkpoints: every
/// byte written is checksummed on the way out and fsync'ed before the file
/// counts as written, and every failure (a full disk, an unwritable folder,
/// a short read) is a one-line titan::Error naming the file.

#include <cstddef>
#include <cstdint>
#include <string>

namespace titan::checkpoint {

/// @brief A file opened for writing from scratch that checksums what it
/// writes (CRC-32, zlib's polynomial) and fsyncs on close().
///
/// Writes go straight to the file descriptor in large pieces (no stream
/// buffer: checkpoint tensors are megabytes to gigabytes). A write error
/// such as ENOSPC throws at once; the destructor closes without syncing a
/// file that was not close()d, so an exception leaves a torn file that the
/// caller's temporary folder discards.
class DurableFile {
 public:
  /// Creates (truncates) `path`; throws titan::Error if it cannot.
  explicit DurableFile(std::string path);
  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  /// Appends `size` bytes; throws titan::Error naming the file on failure.
  void write(const void* data, size_t size);
  /// fsync()s and closes; throws titan::Error if either fails.
  void close();

  uint64_t bytes_written() const { return bytes_; }
  /// CRC-32 of everything written so far.
  uint32_t crc32() const { return crc_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

/// @brief A file of known size that one or more processes fill in place,
/// each writing its own byte ranges (pwrite): how the ranks of a job write
/// one Hugging Face safetensors file together, each its rows of each
/// tensor. The file must exist (create_file_of_size); close() fsyncs.
class FileRegionWriter {
 public:
  /// Opens the existing `path` for writing; throws titan::Error if it cannot.
  explicit FileRegionWriter(std::string path);
  ~FileRegionWriter();
  FileRegionWriter(const FileRegionWriter&) = delete;
  FileRegionWriter& operator=(const FileRegionWriter&) = delete;

  /// Writes `size` bytes at `offset`; throws titan::Error naming the file.
  void write_at(uint64_t offset, const void* data, size_t size);
  /// fsync()s and closes; throws titan::Error if either fails.
  void close();

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

/// @brief Creates (truncates) `path` as a file of `size` bytes that starts
/// with `prefix` (the rest reads as zeros until written), fsync'ed. Throws
/// titan::Error naming the file (an unwritable folder, a full disk).
void create_file_of_size(const std::string& path, const std::string& prefix, uint64_t size);

/// @brief Writes `text` to `path` durably (DurableFile); returns its CRC-32.
uint32_t write_file_durably(const std::string& path, const std::string& text);

/// @brief fsync()s a directory, so that the entries created or renamed in
/// it survive a crash. Throws titan::Error on failure.
void fsync_directory(const std::string& dir);

/// @brief Renames `from` to `to` (same file system; atomic), then fsyncs
/// the parent folder of `to`. Throws titan::Error naming both on failure.
void rename_durably(const std::string& from, const std::string& to);

/// @brief Size in bytes of `path`, or -1 when it does not exist.
int64_t file_size(const std::string& path);

/// @brief CRC-32 of the whole file (streamed in 8 MiB pieces); throws
/// titan::Error naming the file when it cannot be read.
uint32_t file_crc32(const std::string& path);

/// @brief Reads exactly `size` bytes at `offset` of `path` into `dst`;
/// throws titan::Error naming the file on a short read (a truncated file).
void read_exactly(const std::string& path, uint64_t offset, void* dst, size_t size);

/// @brief The whole file as a string; throws titan::Error naming it.
std::string read_text_file(const std::string& path);

}  // namespace titan::checkpoint
