#pragma once
/// @file
/// @brief Reading a dataset as a sequence of documents: plain text files,
/// fortune-style `%`-separated files, JSON Lines with a "text" field (c4's
/// format), or a folder of them. Knows nothing about tokens.

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace titan::data {

/// @brief How a file's documents are laid out.
enum class FileFormat {
  Text,      ///< documents separated by lines that are exactly "%" (none: the file is one document)
  JsonLines  ///< one JSON object per line; the document is its "text" string
};

/// @brief A dataset file and its format.
struct DatasetFile {
  std::string path;
  FileFormat format;
};

/// @brief Where the next document starts: file index, byte offset and line
/// number (for messages) in that file. Restoring it resumes exactly.
struct DocumentPosition {
  int64_t file = 0;
  int64_t offset = 0;
  int64_t line = 1;
};

/// @brief Folder of the built-in corpus: $TITAN_FORTUNES_DIR, else
/// /usr/share/games/fortunes (Debian's `fortunes` package, which
/// scripts/setup.sh installs). Throws titan::Error saying how to get it
/// when it is missing.
std::string builtin_corpus_dir();

/// @brief Maps a configured dataset to a path: "", "builtin" and "fortunes"
/// mean the built-in corpus; anything else must be an existing file or
/// folder (names of downloadable datasets such as "c4" get a message on
/// how to download them).
std::string resolve_dataset_path(const std::string& dataset);

/// @brief The files of a dataset, in the order they are read. A file is
/// read as JSON Lines when it ends in .jsonl or .json, else as text. A
/// folder is walked recursively in sorted path order; there only .jsonl,
/// .json, .txt, .text, .md and extension-less files count, and hidden files
/// are skipped (so fortunes' .dat indexes and .u8 links are left out).
/// Throws titan::Error when there is no such path or no file in it.
std::vector<DatasetFile> list_dataset_files(const std::string& path);

/// @brief Streams the documents of a list of files, one pass (an epoch) at
/// a time, with a position that can be saved and restored.
///
/// Text documents lose the one newline before their separator (or the end
/// of the file), and those that are only whitespace are skipped. In JSON
/// Lines every non-blank line is a document (so that a rank can count the
/// documents of other ranks without parsing them); malformed JSON or a
/// missing "text" throws titan::Error naming the file and line.
class DocumentReader {
 public:
  /// @brief Reads `files` in order from the beginning.
  explicit DocumentReader(std::vector<DatasetFile> files);

  /// @brief Puts the next document into `text`; false once every file is
  /// done (call rewind() to start the next pass). With `skip` the document
  /// is found but not decoded (its text is left empty), which is how a
  /// data-parallel rank passes over the documents of other ranks cheaply.
  bool next(std::string& text, bool skip = false);

  /// @brief Where the next document starts.
  DocumentPosition position() const { return pos_; }
  /// @brief Continues from a position that position() returned.
  void seek(const DocumentPosition& pos);
  /// @brief Back to the first document of the first file.
  void rewind() { seek({}); }

  /// @brief The files, in reading order.
  const std::vector<DatasetFile>& files() const { return files_; }

 private:
  bool read_line(std::string& line);  // from the current file, updating pos_
  bool open_current();

  std::vector<DatasetFile> files_;
  DocumentPosition pos_;
  std::ifstream in_;
  int64_t open_file_ = -1;
};

}  // namespace titan::data
