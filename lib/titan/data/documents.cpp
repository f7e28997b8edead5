#include "titan/data/documents.hpp"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdlib>

#include "titan/util/files.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strings.hpp"

namespace titan::data {

namespace {

bool is_gzip_name(const std::string& path) { return files::extension(path) == ".gz"; }

// The extension that says the format: the one before a final .gz.
std::string format_extension(const std::string& path) {
  return files::extension(is_gzip_name(path) ? path.substr(0, path.size() - 3) : path);
}

FileFormat format_of(const std::string& path) {
  const std::string ext = format_extension(path);
  if (ext == ".jsonl") return FileFormat::JsonLines;
  if (ext == ".json") return FileFormat::Json;
  return FileFormat::Text;
}

bool counts_in_folder(const std::string& path) {
  const std::string ext = format_extension(path);
  // A bare "x.gz" has no format extension left: not a dataset file.
  if (is_gzip_name(path) && ext.empty()) return false;
  return ext.empty() || ext == ".jsonl" || ext == ".json" || ext == ".txt" || ext == ".text" || ext == ".md";
}

// titan links no Parquet reader (docs/data.md says why); the error says
// how to turn such a file into JSON Lines with pyarrow in one line.
void refuse_parquet(const std::string& path) {
  std::string lower = path;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!ends_with(lower, ".parquet")) return;
  throw Error(path +
              ": titan reads no Parquet; convert it to JSON Lines (next to it, then remove the .parquet) with: "
              "python -c \"import json,sys,pyarrow.parquet as pq; t=pq.read_table(sys.argv[1],columns=['text']); "
              "open(sys.argv[1][:-8]+'.jsonl','w').writelines(json.dumps({'text':s})+'\\n' for s in "
              "t.column('text').to_pylist())\" " +
              path);
}

bool only_whitespace(const std::string& s) { return s.find_first_not_of(" \t\r\n\f\v") == std::string::npos; }

std::string record_text(const nlohmann::json& j, const std::string& where) {
  TITAN_CHECK(j.is_object() && j.contains("text") && j["text"].is_string(), where,
              ": expected a JSON object with a string field \"text\" (c4's format)");
  return j["text"].get<std::string>();
}

}  // namespace

std::string builtin_corpus_dir() {
  const char* env = std::getenv("TITAN_FORTUNES_DIR");
  const std::string dir = env && *env ? env : "/usr/share/games/fortunes";
  TITAN_CHECK(files::is_directory(dir), "the built-in corpus '", dir,
              "' is missing: install Debian's fortunes package (scripts/setup.sh or apt-get install fortunes), "
              "set TITAN_FORTUNES_DIR, or set --training.dataset_path to your own text or JSON Lines files");
  return dir;
}

bool is_torchtitan_dataset_name(const std::string& dataset) {
  return dataset == "c4" || dataset == "c4_test" || dataset == "c4_validation";
}

std::string resolve_dataset_path(const std::string& dataset, const std::string& dataset_path) {
  const bool builtin_name = dataset.empty() || dataset == "builtin" || dataset == "fortunes";
  if (!dataset_path.empty()) {
    TITAN_CHECK(builtin_name || is_torchtitan_dataset_name(dataset) || dataset == dataset_path,
                "both [training] dataset ('", dataset, "') and dataset_path ('", dataset_path,
                "') name files: set only dataset_path, or make dataset a name (c4, c4_test, c4_validation, \"\")");
    TITAN_CHECK(files::exists(dataset_path), "[training] dataset_path '", dataset_path,
                "' does not exist (a text, JSON Lines or .json file, their .gz forms, or a folder of them)");
    if ((dataset == "c4" || dataset == "c4_validation") && files::is_directory(dataset_path + "/en"))
      return dataset_path + "/en";
    return dataset_path;
  }
  if (builtin_name) return builtin_corpus_dir();
  if (is_torchtitan_dataset_name(dataset))
    throw Error("dataset '" + dataset +
                "' needs its files on this machine (titan downloads nothing): put JSON Lines with a \"text\" field "
                "in a folder (torchtitan's tests/assets/c4_test, or allenai/c4's en/*.json.gz as they are) and set "
                "[training] dataset_path (--training.dataset_path) to it");
  TITAN_CHECK(files::exists(dataset), "dataset path '", dataset,
              "' does not exist (a text, JSON Lines or .json file, their .gz forms, or a folder of them)");
  return dataset;
}

std::string dataset_split_prefix(const std::string& dataset) {
  if (dataset == "c4") return "c4-train.";
  if (dataset == "c4_validation") return "c4-validation.";
  return "";
}

std::vector<DatasetFile> list_dataset_files(const std::string& path, const std::string& split_prefix) {
  TITAN_CHECK(files::exists(path), "dataset path '", path, "' does not exist");
  std::vector<DatasetFile> out;
  if (!files::is_directory(path)) {
    refuse_parquet(path);
    out.push_back({path, format_of(path), is_gzip_name(path)});
    return out;
  }
  for (const std::string& p : files::list_files(path)) {
    refuse_parquet(p);  // a folder of Parquet shards would otherwise look empty
    if (counts_in_folder(p)) out.push_back({p, format_of(p), is_gzip_name(p)});
  }
  TITAN_CHECK(!out.empty(), "dataset folder '", path,
              "' holds no dataset files (.txt, .md, .jsonl, .json, their .gz forms, or files without an extension)");
  if (split_prefix.empty()) return out;
  std::vector<DatasetFile> split;
  for (const DatasetFile& f : out)
    if (files::base_name(f.path).rfind(split_prefix, 0) == 0) split.push_back(f);
  return split.empty() ? out : split;  // a folder without split names is all one split
}

DocumentReader::DocumentReader(std::vector<DatasetFile> files) : files_(std::move(files)) {}

bool DocumentReader::open_current() {
  if (pos_.file >= static_cast<int64_t>(files_.size())) return false;
  if (open_file_ == pos_.file) return true;
  const DatasetFile& f = files_[pos_.file];
  in_ = std::make_unique<LineReader>(f.path, f.gzip);
  records_.reset();
  bool array = false;
  if (f.format == FileFormat::Json) {
    // A .json file is an array of records or JSON Lines, as Hugging Face's
    // json loader accepts both: its first non-blank character decides.
    std::string first;
    while (in_->next(first) && only_whitespace(first)) {
    }
    const size_t c = first.find_first_not_of(" \t\r\f\v");
    array = c != std::string::npos && first[c] == '[';
    in_->seek(0, 1);
  }
  if (array) {
    auto records = std::make_shared<nlohmann::json>();
    try {
      *records = nlohmann::json::parse(in_->rest());
    } catch (const nlohmann::json::exception& e) {
      throw Error(f.path + ": not a valid JSON array (" + std::string(e.what()).substr(0, 160) + ")");
    }
    TITAN_CHECK(records->is_array(), f.path, ": expected a JSON array of records with a \"text\" field");
    TITAN_CHECK(pos_.offset <= static_cast<int64_t>(records->size()), f.path, ": data position (record ",
                pos_.offset, ") is past its ", records->size(), " records");
    records_ = std::move(records);
  } else {
    in_->seek(pos_.offset, pos_.line);
  }
  open_file_ = pos_.file;
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
  if (!in_->next(line)) return false;
  pos_.offset = in_->offset();
  pos_.line = in_->line();
  return true;
}

bool DocumentReader::next_json_record(std::string& text, bool skip) {
  if (pos_.offset >= static_cast<int64_t>(records_->size())) return false;
  const int64_t k = pos_.offset++;
  pos_.line = pos_.offset + 1;
  if (!skip) text = record_text((*records_)[k], files_[pos_.file].path + ": record " + std::to_string(k + 1));
  return true;
}

bool DocumentReader::next_json_line(std::string& text, bool skip) {
  const std::string& path = files_[pos_.file].path;
  std::string line;
  while (true) {
    const int64_t line_no = pos_.line;
    if (!read_line(line)) return false;
    if (only_whitespace(line)) continue;
    if (skip) return true;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ":" + std::to_string(line_no) + ": not a JSON object (" +
                  std::string(e.what()).substr(0, 120) + ")");
    }
    text = record_text(j, path + ":" + std::to_string(line_no));
    return true;
  }
}

bool DocumentReader::next_text(std::string& text, bool skip) {
  std::string line;
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
  return false;
}

bool DocumentReader::next(std::string& text, bool skip) {
  text.clear();
  while (open_current()) {
    const bool got = records_                                          ? next_json_record(text, skip)
                     : files_[pos_.file].format == FileFormat::Text ? next_text(text, skip)
                                                                      : next_json_line(text, skip);
    if (got) return true;
    // This file is done: on to the next.
    pos_ = {pos_.file + 1, 0, 1};
    open_file_ = -1;
  }
  return false;
}

}  // namespace titan::data
