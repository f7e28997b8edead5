#pragma once
// Helpers shared by the model tests: a small model config and a scratch folder.

#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "titan/models/llama3/model_args.hpp"

namespace titan::testing {

/// A debugmodel-shaped config small enough for fp32 cross-checks in well
/// under a second: GQA (4 query heads, 2 kv heads), 2 layers, vocab 128.
inline models::llama3::ModelArgs tiny_args() {
  models::llama3::ModelArgs a;
  a.dim = 64, a.n_layers = 2, a.n_heads = 4, a.n_kv_heads = 2, a.vocab_size = 128;
  a.multiple_of = 32, a.max_seq_len = 32;
  // Scale RoPE around a short "original" context so that all three bands of
  // the Llama 3.1 scaling (kept, blended, divided) occur with head_dim 16.
  a.rope_theta = 10000.0;
  a.rope_scaling.original_max_position = 64;
  return a;
}

/// A fresh, uniquely named folder under $TMPDIR (or /tmp), without a
/// trailing slash. (Plain POSIX: the torch wheel's libtorch.so exports its own
/// std::filesystem symbols, and the directory iteration behind remove_all
/// then crashes when called from code built with the system compiler.)
inline std::string scratch_dir(const std::string& name) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/titan_" + name + "_XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
  return std::string(buf.data());
}

/// Deletes a folder made by scratch_dir and everything in it.
inline void remove_scratch_dir(const std::string& dir) {
  if (dir.find("/titan_") == std::string::npos) return;  // never anything else
  std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace titan::testing
