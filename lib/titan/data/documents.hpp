#pragma once
/// @file
/// @brief Reading a dataset as a sequence of documents: plain text files,
/// fortune-style `%`-separated files, JSON Lines with a "text" field (c4's
/// format), JSON arrays of such records, their gzip forms, or a folder of
/// them. Knows nothing about tokens.

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "titan/data/line_reader.hpp"

namespace titan::data {

/// @brief How a file's documents are laid out.
enum class FileFormat {
  Text,       ///< documents separated by lines that are exactly "%" (none: the file is one document)
  JsonLines,  ///< one JSON object per line; the document is its "text" string
  Json        ///< .json: a JSON array of such objects when its first character is '[', else JSON Lines
};

/// @brief A dataset file, its format, and whether it is gzip-compressed
/// (its name ends in .gz: `c4-train.00000-of-01024.json.gz`).
struct DatasetFile {
  std::string path;
  FileFormat format;
  bool gzip = false;
};

/// @brief Where the next document starts: file index, offset and line
/// number (for messages) in that file. The offset counts uncompressed
/// bytes, or records in a JSON array. Restoring it resumes exactly.
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

/// @brief True for torchtitan's dataset names ("c4", "c4_test",
/// "c4_validation"), which name files that `dataset_path` must point to.
bool is_torchtitan_dataset_name(const std::string& dataset);

/// @brief Maps the configured `[training] dataset` and `dataset_path` to
/// the files' path. `dataset_path`, when set, is that path (torchtitan's
/// rule); `dataset` is then a name: one of torchtitan's, "", "builtin" or
/// "fortunes" (a path there as well is ambiguous, an error). Without
/// `dataset_path`: "", "builtin" and "fortunes" mean the built-in corpus,
/// a torchtitan name is an error saying where to put its files (titan
/// downloads nothing), anything else must be an existing file or folder.
/// For "c4" and "c4_validation" a folder with an `en/` subfolder (a clone
/// of allenai/c4) resolves to that subfolder: torchtitan loads c4's "en"
/// configuration.
std::string resolve_dataset_path(const std::string& dataset, const std::string& dataset_path = "");

/// @brief The file-name prefix of a named dataset's split: "c4-train." for
/// "c4", "c4-validation." for "c4_validation" (allenai/c4's file names),
/// "" otherwise. See list_dataset_files.
std::string dataset_split_prefix(const std::string& dataset);

/// @brief The files of a dataset, in the order they are read. By name,
/// after a final .gz (then gzip): .jsonl is JSON Lines, .json JSON Lines
/// or a JSON array, anything else text. A folder is walked recursively in
/// sorted path order; there only .jsonl, .json, .txt, .text, .md (each
/// also with .gz) and extension-less files count, and hidden files are
/// skipped (so fortunes' .dat indexes and .u8 links are left out). Throws
/// titan::Error when there is no such path or no file in it, and for a
/// Parquet file (saying how to convert it: titan reads no Parquet). With a
/// `split_prefix`, a folder in which some files' names start with it reads
/// only those (c4's train and validation files share a folder).
std::vector<DatasetFile> list_dataset_files(const std::string& path, const std::string& split_prefix = "");

/// @brief Streams the documents of a list of files, one pass (an epoch) at
/// a time, with a position that can be saved and restored.
///
/// Text documents lose the one newline before their separator (or the end
/// of the file), and those that are only whitespace are skipped. In JSON
/// Lines every non-blank line is a document (so that a rank can count the
/// documents of other ranks without parsing them); in a JSON array every
/// record is one (the array is parsed whole when its file is opened).
/// Malformed JSON or a missing "text" throws titan::Error naming the file
/// and line or record; so does a truncated gzip file.
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
  bool next_text(std::string& text, bool skip);
  bool next_json_line(std::string& text, bool skip);
  bool next_json_record(std::string& text, bool skip);

  std::vector<DatasetFile> files_;
  DocumentPosition pos_;
  std::unique_ptr<LineReader> in_;
  int64_t open_file_ = -1;
  std::shared_ptr<const nlohmann::json> records_;  // the open file's records when it is a JSON array
};

}  // namespace titan::data
