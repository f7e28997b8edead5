#pragma once
/// @file
/// @brief A TOML text written to a temporary file for the life of a test.

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace titan::testing {

/// @brief Writes `text` to a fresh temporary folder as `name` (job.toml by
/// default) and removes both when destroyed.
class TempToml {
 public:
  explicit TempToml(const std::string& text, const std::string& name = "job.toml") {
    dir_ = std::filesystem::temp_directory_path() /
           ("titan_test_toml_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / name).string();
    std::ofstream(path_) << text;
  }
  // Not std::filesystem::remove_all: the copy of it that libtorch.so exports
  // crashes (it wins symbol resolution over libstdc++'s).
  ~TempToml() {
    std::remove(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  TempToml(const TempToml&) = delete;
  TempToml& operator=(const TempToml&) = delete;
  /// @brief The file's path.
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path dir_;
  std::string path_;
};

}  // namespace titan::testing
