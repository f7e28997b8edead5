#pragma once
// Helpers the data tests share: temporary folders, files, the Python
// reference script.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "titan/data/tokenizer.hpp"
#include "support/error_of.hpp"
#include "support/run_command.hpp"
#include "titan/util/error.hpp"

namespace titan::testing {

/// A fresh empty folder under $TMPDIR, removed when the object goes.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// Writes `text` to `path` (creating folders).
void write_file(const std::string& path, const std::string& text);
std::string read_file(const std::string& path);

/// Runs tests/reference/`script` (default tiktoken_reference.py) with
/// `args`; fails the test (ADD_FAILURE) and returns false when it exits
/// non-zero.
bool run_reference(const std::string& args, const std::string& script = "tiktoken_reference.py");

/// Every document of the dataset at `path` (a file or folder), in reading order.
std::vector<std::string> documents(const std::string& path);
/// BOS (256) + bytes + EOS (257) of each document, concatenated: the byte
/// tokenizer's stream.
std::vector<int64_t> byte_stream(const std::vector<std::string>& docs);
/// The byte tokenizer (256 bytes + BOS + EOS).
std::shared_ptr<const data::Tokenizer> bytes();

/// Shell-quotes a path.
std::string quote(const std::string& s);


}  // namespace titan::testing
