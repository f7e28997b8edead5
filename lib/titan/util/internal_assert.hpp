#pragma once
/// @file
/// @brief TITAN_INTERNAL_ASSERT: the check for titan's own invariants, as
/// c10 pairs TORCH_INTERNAL_ASSERT with TORCH_CHECK. TITAN_CHECK (error.hpp)
/// is for bad input and names what the user should change; a failed
/// internal assert is a bug in titan, and says so with the file and line.

#include "titan/util/error.hpp"

/// Throws titan::Error "internal error at file:line: ... (this is a bug in
/// titan)" when `cond` is false.
#define TITAN_INTERNAL_ASSERT(cond, ...)                                                              \
  do {                                                                                                \
    if (!(cond))                                                                                      \
      throw ::titan::Error(::titan::detail::concat("internal error at ", __FILE__, ":", __LINE__, ": ", \
                                                   __VA_ARGS__, " (this is a bug in titan)"));        \
  } while (0)
