#pragma once
/// @file
/// @brief A dataset file read line by line, plain or gzip-compressed (the
/// way allenai/c4 ships its `.json.gz` files), with a seekable position
/// counted in uncompressed bytes.

#include <cstdint>
#include <string>
#include <vector>

namespace titan::data {

/// @brief Reads one file as lines, decompressing it on the fly when it is
/// gzip (detected by its magic bytes, so a plain file works too).
///
/// Errors (an unreadable file, a `.gz` name on a file that is not gzip, a
/// truncated or corrupt gzip stream) are one-line titan::Error naming the
/// file and the line where the data stopped.
class LineReader {
 public:
  /// @brief Opens `path`; `must_be_gzip` (its name ends in .gz) makes a
  /// file without the gzip magic an error instead of plain text.
  LineReader(std::string path, bool must_be_gzip);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  /// @brief Continues at uncompressed byte `offset` (from offset()). On a
  /// gzip file this decompresses everything before it, once.
  void seek(int64_t offset, int64_t line);
  /// @brief The next line without its '\n'; false at the end of the file.
  bool next(std::string& line);
  /// @brief Everything from the current position to the end.
  std::string rest();

  /// @brief Uncompressed byte offset of the next line.
  int64_t offset() const { return offset_; }
  /// @brief 1-based number of the next line (for messages).
  int64_t line() const { return line_; }
  const std::string& path() const { return path_; }

 private:
  bool fill();  // reads more into buf_; false at the end of the data

  std::string path_;
  void* gz_ = nullptr;  // gzFile, kept out of the header
  std::vector<char> buf_;
  size_t head_ = 0, tail_ = 0;  // buf_[head_, tail_) is read but not consumed
  int64_t offset_ = 0, line_ = 1;
};

}  // namespace titan::data
