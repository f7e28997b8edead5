// The readers of outside input as fuzz targets: job TOML and command-line
// overrides, tiktoken files, tokenizer.json and tokenizer_config.json,
// datasets (.jsonl, .json, .txt, .gz), safetensors files, a checkpoint's
// metadata.json and Hugging Face config.json. Shared by the seeded
// mutation fuzzer (fuzz_readers.cpp) and the coverage-guided libFuzzer one
// (libfuzzer/libfuzzer_readers.cpp), so both hold every reader to the same
// rule: accept an input, or refuse it with a titan::Error of one line that
// names the file; anything else is a finding.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace titan_fuzz {

/// A reader of one kind of input: `run` writes the input where the reader
/// expects it and reads it; `names` is what a refusal must mention.
struct Target {
  std::string name;
  std::vector<std::string> seeds;   ///< valid inputs: the corpus starts from them
  std::vector<std::string> tokens;  ///< the format's own words and edge values
  std::function<void(const std::string& input)> run;
  std::function<std::string()> names;  ///< the file (or option) a message must name; "" = no check
};

/// Every target, with its scratch files under `dir` and the job TOML seed
/// read from `source_dir`/train_configs.
std::vector<Target> make_targets(const std::string& dir, const std::string& source_dir);

/// What one input did to a reader.
struct Outcome {
  bool accepted = false;
  bool refused = false;  ///< a titan::Error
  /// A refusal that also says where in the file: a line, column or byte
  /// offset, or the key, entry or token it is about (counted, not required).
  bool located = false;
  std::string message;  ///< the refusal's message
  std::string finding;  ///< empty unless the input broke the rule
};

/// Runs `input` through `target` and judges it. A seed must be accepted.
/// Crashes and hangs are not caught here: the drivers see them.
Outcome run_input(const Target& target, const std::string& input, bool is_seed);

/// Writes `bytes` to `path` (the drivers save findings and seeds with it).
void write_bytes(const std::string& path, const std::string& bytes);

}  // namespace titan_fuzz
