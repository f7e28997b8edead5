// safetensors: C++ round trip, bad files, and both directions with the
// official Python package (tests/reference/safetensors_roundtrip.py).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <iostream>

#include "models/test_util.hpp"
#include "support/run_command.hpp"
#include "titan/checkpoint/safetensors.hpp"
#include "titan/util/error.hpp"

using namespace titan::checkpoint;

namespace {

// The same recipe as expected() in safetensors_roundtrip.py.
std::vector<std::pair<std::string, at::Tensor>> expected() {
  auto base = torch::arange(24, torch::kDouble).view({2, 3, 4}) * 0.5 - 3.0;
  return {
      {"f64", base.clone()},
      {"f32", base.to(torch::kFloat)},
      {"f16", base.to(torch::kHalf)},
      {"bf16", base.to(torch::kBFloat16)},
      {"i64", torch::arange(-5, 5, torch::kLong)},
      {"i32", torch::arange(-6, 6, torch::kInt).view({3, 4})},
      {"i16", torch::arange(-3, 3, torch::kShort)},
      {"i8", torch::arange(-4, 4, torch::kChar)},
      {"u8", torch::arange(0, 250, 50, torch::kByte)},
      {"bool", torch::tensor({true, false, true})},
      {"scalar", torch::tensor(2.5f)},
      {"empty", torch::zeros({0, 3})},
  };
}

const std::map<std::string, std::string> kMetadata = {{"format", "pt"},
                                                      {"written_by", "titan-roundtrip"}};

void expect_matches(const SafetensorsFile& f) {
  auto want = expected();
  ASSERT_EQ(f.tensors.size(), want.size());
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(f.contains(name)) << name;
    const auto& g = f.at(name);
    EXPECT_EQ(g.scalar_type(), w.scalar_type()) << name;
    EXPECT_EQ(g.sizes(), w.sizes()) << name;
    EXPECT_TRUE(torch::equal(g, w)) << name;
  }
  EXPECT_EQ(f.metadata, kMetadata);
}

using titan::testing::python;

std::string script() { return titan::testing::source_path("tests/reference/safetensors_roundtrip.py"); }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string with_header(const std::string& json, const std::string& data) {
  uint64_t n = json.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + json + data;
}

}  // namespace

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  auto dir = titan::testing::scratch_dir("st_roundtrip");
  auto path = (dir + "/t.safetensors");
  save_safetensors(path, expected(), kMetadata);
  SafetensorsFile f = load_safetensors(path);
  expect_matches(f);
  // Tensors come back in file order, which is the order they were given.
  EXPECT_EQ(f.tensors.front().first, "f64");
  EXPECT_EQ(f.tensors.back().first, "empty");
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());
  titan::testing::remove_scratch_dir(dir);
}

TEST(Safetensors, PythonReadsWhatCppWrites) {
  auto dir = titan::testing::scratch_dir("st_cpp_to_py");
  auto path = (dir + "/cpp.safetensors");
  save_safetensors(path, expected(), kMetadata);
  auto r = titan::testing::run_command(python() + " " + script() + " check " + path);
  std::cout << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  titan::testing::remove_scratch_dir(dir);
}

TEST(Safetensors, CppReadsWhatPythonWrites) {
  auto dir = titan::testing::scratch_dir("st_py_to_cpp");
  auto path = (dir + "/py.safetensors");
  auto r = titan::testing::run_command(python() + " " + script() + " write " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_matches(load_safetensors(path));
  titan::testing::remove_scratch_dir(dir);
}

TEST(Safetensors, BadFilesAreOneLineErrorsNamingTheFile) {
  auto dir = titan::testing::scratch_dir("st_bad");
  auto path = (dir + "/bad.safetensors");
  auto expect_error = [&](const std::string& bytes, const std::string& fragment) {
    write_bytes(path, bytes);
    try {
      load_safetensors(path);
      ADD_FAILURE() << "no error for " << fragment;
    } catch (const titan::Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  };
  expect_error("abc", "too short");
  expect_error(with_header("{\"a\":1}", "").substr(0, 10), "header");
  expect_error(with_header("{not json", ""), "not valid JSON");
  expect_error(with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "1234"),
               "outside");
  expect_error(with_header(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "12345678"),
               "need 12");
  expect_error(with_header(R"({"w":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", "12345678"),
               "unsupported dtype 'C64'");
  expect_error(with_header(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", "1234"), "malformed");
  EXPECT_THROW(load_safetensors((dir + "/missing.safetensors")), titan::Error);
  EXPECT_THROW(save_safetensors(path, {{"c", torch::zeros({2}, torch::kComplexFloat)}}), titan::Error);
  titan::testing::remove_scratch_dir(dir);
}
