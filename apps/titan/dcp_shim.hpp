#pragma once
// TEMPORARY, delete when lib/titan/checkpoint/dcp.hpp is merged from main:
// the two functions `titan convert` needs from it, declared as the engineer
// landing it announced. Until then they have no definition, so the titan
// checkpoint side of the command is compiled out (TITAN_CONVERT_HAS_DCP 0)
// and says so at run time instead of pretending to work.

#if __has_include("titan/checkpoint/dcp.hpp")
#include "titan/checkpoint/dcp.hpp"
#define TITAN_CONVERT_HAS_DCP 1
#else
#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>

namespace titan::checkpoint {
/// Full, unsharded model tensors of a titan checkpoint folder step-N (torchtitan names).
std::map<std::string, at::Tensor> read_model_tensors(const std::string& step_dir);
/// A weights-only single-process titan checkpoint folder.
void write_model_checkpoint(const std::string& step_dir, const std::map<std::string, at::Tensor>& tensors,
                            int64_t step);
}  // namespace titan::checkpoint
#define TITAN_CONVERT_HAS_DCP 0
#endif
