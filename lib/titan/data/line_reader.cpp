#include "titan/data/line_reader.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "titan/util/error.hpp"

namespace titan::data {

namespace {

constexpr size_t kChunk = 1 << 18;  // 256 KiB reads: large enough that zlib's call overhead does not show

gzFile as_gz(void* p) { return static_cast<gzFile>(p); }

bool has_gzip_magic(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  TITAN_CHECK(f, "cannot read dataset file '", path, "': ", std::strerror(errno));
  unsigned char m[2] = {0, 0};
  const size_t n = std::fread(m, 1, 2, f);
  std::fclose(f);
  return n == 2 && m[0] == 0x1f && m[1] == 0x8b;
}

}  // namespace

LineReader::LineReader(std::string path, bool must_be_gzip) : path_(std::move(path)) {
  // zlib reads a file without the gzip magic as it is ("transparent"
  // mode), so one code path serves .jsonl and .jsonl.gz alike; only a
  // file *named* .gz must really be gzip, or it is a mistake worth naming.
  TITAN_CHECK(!must_be_gzip || has_gzip_magic(path_), path_, ": not a gzip file (bytes 0-1 are not the gzip magic 1f 8b), despite its .gz name");
  gzFile gz = gzopen(path_.c_str(), "rb");
  TITAN_CHECK(gz, "cannot read dataset file '", path_, "': ", std::strerror(errno));
  gzbuffer(gz, kChunk);
  gz_ = gz;
  buf_.resize(kChunk);
}

LineReader::~LineReader() {
  if (gz_) gzclose(as_gz(gz_));
}

void LineReader::seek(int64_t offset, int64_t line) {
  TITAN_CHECK(offset >= 0, path_, ": negative data position ", offset);
  head_ = tail_ = 0;
  offset_ = offset;
  line_ = line;
  // gzseek on a gzip file decompresses up to the offset; on a plain file
  // it is an lseek. Past the end it fails or lands at the end: both are a
  // position this file cannot have come from.
  const z_off_t got = gzseek(as_gz(gz_), static_cast<z_off_t>(offset), SEEK_SET);
  TITAN_CHECK(got == static_cast<z_off_t>(offset), path_, ": cannot seek to byte ", offset,
              " (the file is shorter than when the data position was saved, or its gzip data is corrupt)");
}

bool LineReader::fill() {
  if (head_ > 0) {  // keep the unconsumed part at the front
    std::memmove(buf_.data(), buf_.data() + head_, tail_ - head_);
    tail_ -= head_;
    head_ = 0;
  }
  if (tail_ == buf_.size()) buf_.resize(buf_.size() * 2);  // a line longer than the buffer
  const int n = gzread(as_gz(gz_), buf_.data() + tail_, static_cast<unsigned>(buf_.size() - tail_));
  int err = Z_OK;
  const char* msg = gzerror(as_gz(gz_), &err);
  // Z_BUF_ERROR: the gzip stream ended before its end marker (a truncated
  // download); anything else non-zero: corrupt data or an I/O error.
  if (n < 0 || (n == 0 && err != Z_OK && err != Z_STREAM_END))
    throw Error(path_ + ":" + std::to_string(line_) + ": " +
                (err == Z_BUF_ERROR ? std::string("the gzip data ends early (a truncated file?)")
                                    : std::string("cannot read: ") + (msg ? msg : "unknown zlib error")));
  tail_ += static_cast<size_t>(n);
  return n > 0;
}

bool LineReader::next(std::string& line) {
  size_t scanned = head_;
  while (true) {
    const void* nl = std::memchr(buf_.data() + scanned, '\n', tail_ - scanned);
    if (nl) {
      const size_t end = static_cast<const char*>(nl) - buf_.data();
      line.assign(buf_.data() + head_, end - head_);
      offset_ += static_cast<int64_t>(end - head_ + 1);
      ++line_;
      head_ = end + 1;
      return true;
    }
    const size_t done = tail_ - head_;  // fill() moves the unconsumed part to the front
    if (!fill()) break;
    scanned = done;
  }
  if (tail_ == head_) return false;
  line.assign(buf_.data() + head_, tail_ - head_);  // the last line has no '\n'
  offset_ += static_cast<int64_t>(tail_ - head_);
  ++line_;
  head_ = tail_;
  return true;
}

std::string LineReader::rest() {
  std::string out(buf_.data() + head_, tail_ - head_);
  head_ = tail_ = 0;
  while (fill()) {
    out.append(buf_.data(), tail_);
    tail_ = 0;
  }
  offset_ += static_cast<int64_t>(out.size());
  return out;
}

}  // namespace titan::data
