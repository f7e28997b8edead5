#include "titan/util/files.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "titan/util/error.hpp"

namespace titan::files {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool make_directories(const std::string& path) {
  if (path.empty() || is_directory(path)) return true;
  const std::string parent = dir_name(path);
  if (parent != path && parent != "." && parent != "/" && !make_directories(parent)) return false;
  return ::mkdir(path.c_str(), 0777) == 0 || errno == EEXIST;
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string dir_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string extension(const std::string& path) {
  const std::string name = base_name(path);
  const size_t dot = name.find_last_of('.');
  if (dot == std::string::npos || dot == 0) return "";
  std::string ext = name.substr(dot);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

namespace {
void walk(const std::string& dir, std::vector<std::string>& out) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);  // hidden, "." and ".."
  ::closedir(d);
  for (const auto& name : names) {
    const std::string p = dir + "/" + name;
    struct stat lst, st;
    if (::lstat(p.c_str(), &lst) != 0) continue;
    if (S_ISDIR(lst.st_mode)) walk(p, out);  // real folders only: no symlink loops
    else if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) out.push_back(p);
  }
}
}  // namespace

std::vector<std::string> list_files(const std::string& dir) {
  std::string root = dir;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  std::vector<std::string> out;
  walk(root, out);
  std::sort(out.begin(), out.end());
  return out;
}

void remove_all(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR* d = ::opendir(path.c_str())) {
      std::vector<std::string> names;
      while (dirent* e = ::readdir(d))
        if (std::string n = e->d_name; n != "." && n != "..") names.push_back(n);
      ::closedir(d);
      for (const auto& n : names) remove_all(path + "/" + n);
    }
    ::rmdir(path.c_str());
  } else {
    ::unlink(path.c_str());
  }
}

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  TITAN_CHECK(in, "cannot read ", what, " '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  TITAN_CHECK(!in.bad(), "cannot read ", what, " '", path, "': ", std::strerror(errno));
  return ss.str();
}

std::string temp_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

std::string join(const std::string& base, const std::string& path) {
  if (!path.empty() && path.front() == '/') return path;
  if (base.empty()) return path;
  return base.back() == '/' ? base + path : base + "/" + path;
}

}  // namespace titan::files
