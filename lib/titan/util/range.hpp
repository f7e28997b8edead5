#pragma once
/// @file
/// @brief TITAN_PROFILE_RANGE: a named range in profiler traces, for any
/// layer of the library (this header depends on ATen only).

#include <ATen/record_function.h>

/// Marks the enclosing scope as a named range in Kineto / torch.profiler
/// traces (a user-scope RecordFunction). When no profiler is recording it
/// costs a branch: `name` (a std::string or C string) is only built then.
#define TITAN_PROFILE_RANGE(name) RECORD_USER_SCOPE(name)
