#include "titan/data/documents.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "titan/data/files.hpp"
#include "titan/util/error.hpp"

namespace titan::data {

namespace {

FileFormat format_of(const std::string& path) {
  const std::string ext = files::extension(path);
  return ext == ".jsonl" || ext == ".json" ? FileFormat::JsonLines : FileFormat::Text;
}

bool counts_in_folder(const std::string& path) {
  const std::string ext = files::extension(path);
  return ext.empty() || ext == ".jsonl" || ext == ".json" || ext == ".txt" || ext == ".text" || ext == ".md";
}

bool only_whitespace(const std::string& s) { return s.find_first_not_of(" \t\r\n\f\v") == std::string::npos; }

}  // namespace

std::string builtin_corpus_dir() {
  const char* env = std::getenv("TITAN_FORTUNES_DIR");
  const std::string dir = env && *env ? env : "/usr/share/games/fortunes";
  TITAN_CHECK(files::is_directory(dir), "the built-in corpus '", dir,
              "' is missing: install Debian's fortunes package (scripts/setup.sh or apt-get install fortunes), "
              "set TITAN_FORTUNES_DIR, or set --training.dataset_path to your own text or JSON Lines files");
  return dir;
}

std::string resolve_dataset_path(const std::string& dataset) {
  if (dataset.empty() || dataset == "builtin" || dataset == "fortunes") return builtin_corpus_dir();
  if (files::exists(dataset)) return dataset;
  if (dataset == "c4" || dataset == "c4_test" || dataset == "c4_mini")
    throw Error("dataset '" + dataset +
                "' is not on this machine and titan downloads nothing: fetch c4's en/*.json.gz (allenai/c4), "
                "decompress them, and set --training.dataset_path to their folder; or leave it empty for the "
                "built-in corpus");
  throw Error("dataset path '" + dataset + "' does not exist (a text file, a .jsonl file, or a folder of them)");
}

std::vector<DatasetFile> list_dataset_files(const std::string& path) {
  TITAN_CHECK(files::exists(path), "dataset path '", path, "' does not exist");
  std::vector<DatasetFile> out;
  if (!files::is_directory(path)) {
    out.push_back({path, format_of(path)});
    return out;
  }
  for (const std::string& p : files::list_files(path))
    if (counts_in_folder(p)) out.push_back({p, format_of(p)});
  TITAN_CHECK(!out.empty(), "dataset folder '", path,
              "' holds no dataset files (.txt, .md, .jsonl, .json or files without an extension)");
  return out;
}

DocumentReader::DocumentReader(std::vector<DatasetFile> files) : files_(std::move(files)) {}

bool DocumentReader::open_current() {
  if (pos_.file >= static_cast<int64_t>(files_.size())) return false;
  if (open_file_ != pos_.file) {
    in_.close();
    in_.clear();
    in_.open(files_[pos_.file].path, std::ios::binary);
    TITAN_CHECK(in_.is_open(), "cannot read dataset file '", files_[pos_.file].path, "': ", std::strerror(errno));
    open_file_ = pos_.file;
    in_.seekg(pos_.offset);
  }
  return true;
}

void DocumentReader::seek(const DocumentPosition& pos) {
  TITAN_CHECK(pos.file >= 0 && pos.file <= static_cast<int64_t>(files_.size()) && pos.offset >= 0,
              "data position (file ", pos.file, ", offset ", pos.offset, ") is outside this dataset of ",
              files_.size(), " files");
  pos_ = pos;
  open_file_ = -1;  // reopen and seek on the next read
}

bool DocumentReader::read_line(std::string& line) {
  if (!std::getline(in_, line)) return false;
  pos_.offset += static_cast<int64_t>(line.size()) + (in_.eof() ? 0 : 1);
  pos_.line += 1;
  return true;
}

bool DocumentReader::next(std::string& text, bool skip) {
  text.clear();
  std::string line;
  while (open_current()) {
    const DatasetFile& f = files_[pos_.file];
    if (f.format == FileFormat::JsonLines) {
      while (true) {
        const int64_t line_no = pos_.line;
        if (!read_line(line)) break;
        if (only_whitespace(line)) continue;
        if (skip) return true;
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
          throw Error(f.path + ":" + std::to_string(line_no) + ": not a JSON object (" +
                      std::string(e.what()).substr(0, 120) + ")");
        }
        TITAN_CHECK(j.is_object() && j.contains("text") && j["text"].is_string(), f.path, ":", line_no,
                    ": expected a JSON object with a string field \"text\" (c4's format)");
        text = j["text"].get<std::string>();
        return true;
      }
    } else {
      bool any = false;
      while (read_line(line)) {
        if (line == "%" || line == "%\r") {
          if (any && !only_whitespace(text)) {
            if (skip) text.clear();
            return true;
          }
          text.clear();
          any = false;
          continue;
        }
        if (any) text += '\n';
        text += line;
        any = true;
      }
      if (any && !only_whitespace(text)) {
        if (skip) text.clear();
        return true;
      }
      text.clear();
    }
    // This file is done: on to the next.
    pos_ = {pos_.file + 1, 0, 1};
    open_file_ = -1;
  }
  return false;
}

}  // namespace titan::data
