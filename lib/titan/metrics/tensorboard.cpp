#include "titan/metrics/tensorboard.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "titan/util/files.hpp"
#include "titan/util/error.hpp"

namespace titan::metrics {

namespace tb {

namespace {

// The byte-at-a-time table of the reflected Castagnoli polynomial. Debian
// 12 packages no CRC-32C library (Boost.CRC would need all of libboost-dev);
// an event file is a few kB per log line, so speed does not matter.
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

void put_fixed32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_fixed64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
}

// Protobuf wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
void put_key(std::string& s, int field, int wire_type) {
  put_varint(s, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}
void put_bytes(std::string& s, int field, const std::string& bytes) {
  put_key(s, field, 2);
  put_varint(s, bytes.size());
  s += bytes;
}
void put_double(std::string& s, int field, double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(s, field, 1);
  put_fixed64(s, bits);
}
void put_float(std::string& s, int field, float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(s, field, 5);
  put_fixed32(s, bits);
}

// tensorflow/core/util/event.proto: Event{wall_time = 1, step = 2,
// file_version = 3, summary = 5}. proto3 leaves out a zero step, as
// protobuf's own serializer would.
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_double(e, 1, wall_time);
  if (step != 0) {
    put_key(e, 2, 0);
    put_varint(e, static_cast<uint64_t>(step));  // int64: two's complement, 10 bytes if negative
  }
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string frame_record(const std::string& data) {
  std::string r;
  r.reserve(data.size() + 16);
  put_fixed64(r, data.size());
  put_fixed32(r, masked_crc32c(r.data(), 8));
  r += data;
  put_fixed32(r, masked_crc32c(data.data(), data.size()));
  return r;
}

std::string file_version_event(double wall_time, const std::string& version) {
  std::string e = event_head(wall_time, 0);
  put_bytes(e, 3, version);
  return e;
}

std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  // tensorflow/core/framework/summary.proto: Summary{repeated Value value = 1},
  // Value{string tag = 1, float simple_value = 2}.
  std::string v;
  put_bytes(v, 1, tag);
  put_float(v, 2, value);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

}  // namespace tb

namespace {

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// mkdir -p; false (errno set) on failure.
bool make_dirs(const std::string& path) {
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    prefix = path.substr(0, pos);
    if (prefix.empty()) continue;
    if (::mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST) return false;
  }
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::string tensorboard_run_dir(const std::string& dump_folder, const std::string& save_tb_folder) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M", &local);  // torchtitan's datetime format
  const std::string base = files::join(dump_folder, save_tb_folder);
  return base + "/" + stamp;
}

EventWriter::EventWriter(const std::string& log_dir) : log_dir_(log_dir) {
  TITAN_CHECK(make_dirs(log_dir_), "cannot create TensorBoard folder '", log_dir_, "': ", std::strerror(errno));
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  // torch.utils.tensorboard's name: two writers in one folder (two runs
  // started in the same minute) get different files, and TensorBoard reads both.
  path_ = log_dir_ + "/events.out.tfevents." + std::to_string(static_cast<long long>(std::time(nullptr))) + "." +
          host + "." + std::to_string(::getpid()) + ".0";
  out_.open(path_, std::ios::binary | std::ios::trunc);
  TITAN_CHECK(out_.good(), "cannot open TensorBoard event file '", path_, "' for writing");
  write(tb::file_version_event(wall_time_now()));
  flush();
}

EventWriter::~EventWriter() {
  try {
    flush();
  } catch (...) {
  }
}

void EventWriter::write(const std::string& event) {
  out_ << tb::frame_record(event);
  TITAN_CHECK(out_.good(), "writing TensorBoard event file '", path_, "' failed");
}

void EventWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  write(tb::scalar_event(wall_time_now(), step, tag, static_cast<float>(value)));
}

void EventWriter::flush() { out_.flush(); }

}  // namespace titan::metrics
