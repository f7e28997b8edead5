#include "data_test_util.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>

#include "support/run_command.hpp"
#include "titan/data/byte_tokenizer.hpp"
#include "titan/data/documents.hpp"
#include "titan/util/files.hpp"

namespace titan::testing {
namespace files = titan::files;

TempDir::TempDir() {
  std::string tmpl = files::temp_dir() + "/titan-data-XXXXXX";
  char* made = mkdtemp(tmpl.data());
  if (!made) throw std::runtime_error("mkdtemp failed");
  path_ = made;
}

TempDir::~TempDir() {
  files::remove_all(path_);
}

void write_file(const std::string& path, const std::string& text) {
  files::make_directories(files::dir_name(path));
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool run_reference(const std::string& args, const std::string& script) {
  const std::string cmd = quote(python()) + " " + quote(source_path("tests/reference/" + script)) + " " + args;
  CommandResult r = run_command(cmd);
  if (r.exit_code != 0) {
    ADD_FAILURE() << "reference failed (" << r.exit_code << "): " << cmd << "\n" << r.output;
    return false;
  }
  return true;
}

std::vector<std::string> documents(const std::string& path) {
  data::DocumentReader r(data::list_dataset_files(path));
  std::vector<std::string> out;
  std::string t;
  while (r.next(t)) out.push_back(t);
  return out;
}

std::vector<int64_t> byte_stream(const std::vector<std::string>& docs) {
  std::vector<int64_t> out;
  for (const auto& d : docs) {
    out.push_back(256);
    for (unsigned char c : d) out.push_back(c);
    out.push_back(257);
  }
  return out;
}

std::shared_ptr<const data::Tokenizer> bytes() { return std::make_shared<data::ByteTokenizer>(); }

}  // namespace titan::testing
