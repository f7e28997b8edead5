#include "titan/checkpoint/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "titan/util/files.hpp"
#include "titan/util/error.hpp"

namespace titan::checkpoint {

namespace {

std::string errno_text() { return std::strerror(errno); }

// zlib's crc32 takes a uInt length: feed it at most 1 GiB at a time.
uint32_t crc32_update(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const Bytef*>(data);
  while (size > 0) {
    const size_t piece = std::min<size_t>(size, size_t{1} << 30);
    crc = static_cast<uint32_t>(::crc32(crc, p, static_cast<uInt>(piece)));
    p += piece;
    size -= piece;
  }
  return crc;
}

}  // namespace

DurableFile::DurableFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TITAN_CHECK(fd_ >= 0, "checkpoint: cannot create ", path_, ": ", errno_text());
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
}

void DurableFile::write(const void* data, size_t size) {
  TITAN_CHECK(fd_ >= 0, "checkpoint: write to ", path_, " after close");
  crc_ = crc32_update(crc_, data, size);
  // write() may write less than asked (Linux moves at most ~2 GiB per
  // call, a signal can cut it short): loop until all is written, in 1 GiB
  // pieces, retrying an interrupted call.
  const char* p = static_cast<const char*>(data);
  size_t left = size;
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, std::min<size_t>(left, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    TITAN_CHECK(n > 0, "checkpoint: writing ", path_, " failed after ", bytes_ + (size - left), " bytes: ",
                n < 0 ? errno_text() : std::string("no progress"), errno == ENOSPC ? " (disk full)" : "");
    p += n;
    left -= static_cast<size_t>(n);
  }
  bytes_ += size;
}

void DurableFile::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  // The data must be on disk before the checkpoint's commit (a rename)
  // names it. A failed fsync fails the save rather than being retried:
  // after one, Linux may already have dropped the unwritten pages, and a
  // second fsync would report success for data that is gone.
  if (::fsync(fd) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw Error("checkpoint: fsync of " + path_ + " failed: " + why);
  }
  TITAN_CHECK(::close(fd) == 0, "checkpoint: closing ", path_, " failed: ", errno_text());
}

FileRegionWriter::FileRegionWriter(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  TITAN_CHECK(fd_ >= 0, "checkpoint: cannot open ", path_, " for writing: ", errno_text());
}

FileRegionWriter::~FileRegionWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void FileRegionWriter::write_at(uint64_t offset, const void* data, size_t size) {
  TITAN_CHECK(fd_ >= 0, "checkpoint: write to ", path_, " after close");
  // pwrite() moves no shared file position (other processes write other
  // ranges of the same file) and, like write(), may write less than asked.
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd_, p + done, std::min<size_t>(size - done, size_t{1} << 30),
                               static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    TITAN_CHECK(n > 0, "checkpoint: writing ", size, " bytes at offset ", offset, " of ", path_, " failed: ",
                n < 0 ? errno_text() : std::string("no progress"), errno == ENOSPC ? " (disk full)" : "");
    done += static_cast<size_t>(n);
  }
}

void FileRegionWriter::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {  // as DurableFile::close: a failed fsync fails the save
    const std::string why = errno_text();
    ::close(fd);
    throw Error("checkpoint: fsync of " + path_ + " failed: " + why);
  }
  TITAN_CHECK(::close(fd) == 0, "checkpoint: closing ", path_, " failed: ", errno_text());
}

void create_file_of_size(const std::string& path, const std::string& prefix, uint64_t size) {
  TITAN_CHECK(prefix.size() <= size, "checkpoint: ", path, ": a prefix of ", prefix.size(),
              " bytes does not fit a file of ", size);
  DurableFile f(path);
  f.write(prefix.data(), prefix.size());
  f.close();
  // Grown to its size now (a hole, no bytes written), so that every rank
  // can write its ranges in any order; a full disk shows when they do.
  TITAN_CHECK(::truncate(path.c_str(), static_cast<off_t>(size)) == 0, "checkpoint: cannot size ", path, " to ",
              size, " bytes: ", errno_text());
}

uint32_t write_file_durably(const std::string& path, const std::string& text) {
  DurableFile f(path);
  f.write(text.data(), text.size());
  f.close();
  return f.crc32();
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TITAN_CHECK(fd >= 0, "checkpoint: cannot open folder ", dir, ": ", errno_text());
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : "";
  ::close(fd);
  TITAN_CHECK(rc == 0, "checkpoint: fsync of folder ", dir, " failed: ", why);
}

// rename() within one filesystem is atomic: a reader sees the old name or
// the new one, never a half-written file. The rename itself is an entry in
// the folder, so the folder is fsynced too, or a power cut could undo the
// commit after it returned.
void rename_durably(const std::string& from, const std::string& to) {
  TITAN_CHECK(::rename(from.c_str(), to.c_str()) == 0, "checkpoint: cannot rename ", from, " to ", to, ": ",
              errno_text());
  fsync_directory(files::dir_name(to));
}

int64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_size);
}

uint32_t file_crc32(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TITAN_CHECK(fd >= 0, "checkpoint: cannot open ", path, ": ", errno_text());
  std::vector<char> buf(size_t{8} << 20);
  uint32_t crc = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = errno_text();
      ::close(fd);
      throw Error("checkpoint: reading " + path + " failed: " + why);
    }
    if (n == 0) break;
    crc = crc32_update(crc, buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return crc;
}

void read_exactly(const std::string& path, uint64_t offset, void* dst, size_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TITAN_CHECK(fd >= 0, "checkpoint: cannot open ", path, ": ", errno_text());
  // pread() at an offset leaves no shared file position behind (the
  // loaders of several threads may read one file); it too may return less
  // than asked, and 0 at the end of a truncated file.
  char* p = static_cast<char*>(dst);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, p + done, std::min<size_t>(size - done, size_t{1} << 30),
                              static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? errno_text() : "the file ends there (truncated?)";
      ::close(fd);
      throw Error("checkpoint: " + path + ": cannot read " + std::to_string(size) + " bytes at offset " +
                  std::to_string(offset) + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

std::string read_text_file(const std::string& path) {
  const int64_t size = file_size(path);
  TITAN_CHECK(size >= 0, "checkpoint: ", path, " does not exist");
  std::string text(static_cast<size_t>(size), '\0');
  if (size > 0) read_exactly(path, 0, text.data(), text.size());
  return text;
}

}  // namespace titan::checkpoint
