#pragma once
/// @file
/// @brief Number formats of the training log: thousands separators, GiB,
/// durations.

#include <cstdint>
#include <string>

namespace titan::metrics {

/// 12345.6 → "12,346" (rounded to an integer, as torchtitan's `{round(tps):,}`).
std::string with_thousands(double value);

/// Bytes → "1.23GiB" (2 decimals, binary units like torchtitan's memory).
std::string gib(int64_t bytes);

/// Bytes → "1.50 KiB" (2 decimals and the largest binary unit below the
/// value; whole bytes as "512 B"), for tables of sizes.
std::string human_bytes(double bytes);

/// Seconds → "1:02:03" (h:mm:ss), "2:03" (m:ss) or "5s"; "?" for < 0 / NaN.
std::string duration(double seconds);

}  // namespace titan::metrics
