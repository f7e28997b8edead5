// TensorBoard event files: CRC-32C against published vectors, the Event
// protobuf bytes and TFRecord framing against what Python's protobuf and
// tensorboard produce for the same values, and the EventWriter's file.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "titan/metrics/tensorboard.hpp"

namespace {

using namespace titan::metrics;

std::string hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : bytes) s += {d[c >> 4], d[c & 15]};
  return s;
}

uint32_t crc_of(const std::string& s) { return tb::crc32c(s.data(), s.size()); }

TEST(Crc32c, KnownVectors) {
  // The check value of CRC-32C (Castagnoli) and RFC 3720 (iSCSI) B.4's.
  EXPECT_EQ(crc_of("123456789"), 0xE3069283u);
  EXPECT_EQ(crc_of(""), 0u);
  EXPECT_EQ(crc_of(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc_of(std::string(32, '\xff')), 0x62A8AB43u);
  std::string inc(32, '\0');
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<char>(i);
  EXPECT_EQ(crc_of(inc), 0x46DD794Eu);
  // Continuing a CRC over a split buffer gives the CRC of the whole.
  EXPECT_EQ(tb::crc32c("6789", 4, tb::crc32c("12345", 5)), 0xE3069283u);
}

TEST(Crc32c, MaskIsTfRecords) {
  const uint32_t c = crc_of("123456789");
  EXPECT_EQ(tb::masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

// The expected bytes below are Python's: tensorboard.compat.proto.event_pb2
// Event(...).SerializeToString(), and the record framed with the tensorboard
// package's own masked_crc32c (tensorflow_stub.pywrap_tensorflow).
TEST(EventEncoding, FileVersionEventMatchesProtobuf) {
  EXPECT_EQ(hex(tb::file_version_event(1700000000.5)), "0900002040fc54d9411a0d627261696e2e4576656e743a32");
}

TEST(EventEncoding, ScalarEventAndRecordMatchPython) {
  const std::string e = tb::scalar_event(1700000000.25, 42, "loss_metrics/global_avg_loss", 7.125f);
  EXPECT_EQ(hex(e),
            "0900001040fc54d941102a2a250a230a1c6c6f73735f6d6574726963732f676c6f62616c5f6176675f6c6f7373150000e440");
  const std::string r = tb::frame_record(e);
  ASSERT_EQ(r.size(), e.size() + 16);
  // length 50 (u64 LE), masked CRC of the length 0xec561924, the event,
  // masked CRC of the event 0x19967736.
  EXPECT_EQ(hex(r.substr(0, 12)), "3200000000000000241956ec");
  EXPECT_EQ(r.substr(12, e.size()), e);
  EXPECT_EQ(hex(r.substr(12 + e.size())), "36779619");
}

TEST(EventEncoding, LargeStepIsAVarint) {
  // step 300 = varint ac 02 after key 0x10.
  const std::string e = tb::scalar_event(0.0, 300, "x", 1.0f);
  EXPECT_NE(hex(e).find("10ac02"), std::string::npos) << hex(e);
}

TEST(EventWriter, WritesFramedRecords) {
  char tmpl[] = "/tmp/titan_tb_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = std::string(tmpl) + "/tb/run";
  std::string path;
  {
    EventWriter w(dir);
    path = w.path();
    EXPECT_EQ(path.rfind(dir + "/events.out.tfevents.", 0), 0u) << path;
    w.add_scalar("lr", 3e-4, 1);
    w.add_scalar("lr", 2e-4, 2);
  }
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // Walk the records, checking both CRCs of each.
  size_t pos = 0;
  int n = 0;
  while (pos < bytes.size()) {
    ASSERT_LE(pos + 12, bytes.size());
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = len << 8 | static_cast<unsigned char>(bytes[pos + i]);
    auto u32 = [&](size_t at) {
      uint32_t v = 0;
      for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(bytes[at + i]);
      return v;
    };
    EXPECT_EQ(u32(pos + 8), tb::masked_crc32c(bytes.data() + pos, 8));
    ASSERT_LE(pos + 16 + len, bytes.size());
    EXPECT_EQ(u32(pos + 12 + len), tb::masked_crc32c(bytes.data() + pos + 12, len));
    if (n == 0) EXPECT_NE(bytes.substr(pos + 12, len).find("brain.Event:2"), std::string::npos);
    pos += 16 + len;
    ++n;
  }
  EXPECT_EQ(pos, bytes.size());
  EXPECT_EQ(n, 3);
  std::system(("rm -rf '" + std::string(tmpl) + "'").c_str());
}

TEST(EventWriter, UncreatableFolderIsAnErrorNamingIt) {
  try {
    EventWriter w("/proc/titan_no_such/tb");
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/titan_no_such/tb"), std::string::npos) << e.what();
  }
}

TEST(TensorboardRunDir, TorchtitansLayout) {
  const std::string d = tensorboard_run_dir("out", "tb");
  ASSERT_EQ(d.rfind("out/tb/", 0), 0u) << d;
  EXPECT_EQ(d.size(), std::string("out/tb/20260101-1200").size()) << d;
  EXPECT_EQ(d[15], '-') << d;
  EXPECT_EQ(tensorboard_run_dir("out", "/abs/tb").rfind("/abs/tb/", 0), 0u);
}

}  // namespace
