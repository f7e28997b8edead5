#pragma once
// Helpers the trainer tests share: a scratch folder, a tiny model and a
// config that trains it in well under a second per run.

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "titan/config/job_config.hpp"
#include "titan/models/llama3/model_args.hpp"

namespace titan::testing {

/// A folder under $TMPDIR (or /tmp), removed with everything in it at scope
/// exit. (rm -rf, not std::filesystem: see lib/titan/util/files.hpp.)
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/titan_" + name + "_XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = buf.data();
  }
  ~ScratchDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  /// Writes `text` to `name` in the folder and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  std::string path_;
};

/// debugmodel's shape shrunk to ~0.3M parameters (GQA kept), with the
/// built-in tokenizer's vocabulary so that the built-in corpus fits.
inline models::llama3::ModelArgs tiny_model() {
  models::llama3::ModelArgs a = models::llama3::flavor_args("debugmodel");
  a.dim = 64, a.n_layers = 2, a.n_heads = 4, a.n_kv_heads = 2, a.multiple_of = 32;
  return a;
}

/// A short run of the tiny model on the built-in corpus, CPU, fp32.
inline config::JobConfig tiny_config(const std::string& dump_folder, int64_t steps = 20) {
  config::JobConfig c;
  c.job.dump_folder = dump_folder;
  c.training.device = "cpu";
  c.training.batch_size = 4;
  c.training.seq_len = 32;
  c.training.steps = steps;
  c.training.seed = 7;
  c.lr_scheduler.warmup_steps = 2;
  c.optimizer.lr = 1e-2;
  c.metrics.log_freq = 5;
  return c;
}

}  // namespace titan::testing
