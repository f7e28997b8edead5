#pragma once
/// @file
/// @brief Everything of the config system in one include: JobConfig,
/// loading (defaults < TOML file < command line), validation, feature
/// gating and the option/alias schema. docs/config.md is the user's guide.

#include "titan/config/job_config.hpp"  // IWYU pragma: export
#include "titan/config/load.hpp"        // IWYU pragma: export
#include "titan/config/schema.hpp"      // IWYU pragma: export
#include "titan/config/supported.hpp"   // IWYU pragma: export
#include "titan/config/torchtitan.hpp"  // IWYU pragma: export
#include "titan/config/validate.hpp"    // IWYU pragma: export
