#pragma once
/// @file
/// @brief The few file-system operations the data pipeline needs, on POSIX
/// calls rather than std::filesystem.
///
/// Why: libtorch.so (torch 2.11 wheel) exports its own copy of libstdc++'s
/// std::filesystem functions, and the dynamic linker binds some calls to
/// that copy and others to the system one; mixing them crashes (seen in
/// remove_all). Plain POSIX has no such clash.

#include <string>
#include <vector>

namespace titan::files {

/// @brief True when `path` names anything (following symlinks).
bool exists(const std::string& path);
/// @brief True when `path` is a directory (following symlinks).
bool is_directory(const std::string& path);
/// @brief True when `path` is a regular file (following symlinks).
bool is_regular_file(const std::string& path);
/// @brief Creates `path` and its missing parents; false on failure.
bool make_directories(const std::string& path);
/// @brief The last component of `path` ("a/b.txt" -> "b.txt").
std::string base_name(const std::string& path);
/// @brief Everything before the last '/' ("a/b.txt" -> "a"; "b" -> ".").
std::string dir_name(const std::string& path);
/// @brief The lower-cased extension with its dot ("A.JSONL" -> ".jsonl"; ".bashrc" -> "").
std::string extension(const std::string& path);
/// @brief Regular files under `dir` (recursively, following symlinks to
/// files, not into folders; hidden entries skipped), sorted by path.
std::vector<std::string> list_files(const std::string& dir);
/// @brief `base/path`, or `path` itself when it is absolute (Python's
/// os.path.join, which torchtitan uses for every folder under dump_folder).
std::string join(const std::string& base, const std::string& path);
/// @brief The whole content of the file `path`; throws titan::Error
/// "cannot read <what> '<path>': <reason>" when it cannot be read.
std::string read_file(const std::string& path, const std::string& what = "file");
/// @brief Removes a file or a folder tree; best effort.
void remove_all(const std::string& path);
/// @brief $TMPDIR, else /tmp.
std::string temp_dir();

}  // namespace titan::files
