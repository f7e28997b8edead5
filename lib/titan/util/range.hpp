#pragma once
/// @file
/// @brief TITAN_PROFILE_RANGE: a named range in profiler traces, for any
/// layer of the library (this header depends on ATen only), and the
/// innermost range's name for the flight recorder.

#include <ATen/record_function.h>

#include <string>

namespace titan {

/// @brief The name of a TITAN_PROFILE_RANGE while it is open, kept per
/// thread so that the collectives issued inside it can say what they were
/// for ("fsdp::all_gather layers.3") in the flight recorder's dumps.
class RangeLabel {
 public:
  explicit RangeLabel(std::string name) : name_(std::move(name)), outer_(innermost_) { innermost_ = this; }
  ~RangeLabel() { innermost_ = outer_; }
  RangeLabel(const RangeLabel&) = delete;
  RangeLabel& operator=(const RangeLabel&) = delete;
  const std::string& name() const { return name_; }
  /// The innermost open range of this thread; "" outside every range.
  static const std::string& innermost() {
    static const std::string kNone;
    return innermost_ ? innermost_->name_ : kNone;
  }

 private:
  std::string name_;
  const RangeLabel* outer_;
  static inline thread_local const RangeLabel* innermost_ = nullptr;
};

}  // namespace titan

/// Marks the enclosing scope as a named range in Kineto / torch.profiler
/// traces (a user-scope RecordFunction) and as the flight recorder's label
/// of the communication issued inside it. The name is built every time (a
/// string; the ranges are per unit, stage action or phase, not per op).
#define TITAN_PROFILE_RANGE(range_name)                \
  ::titan::RangeLabel titan_range_label_{range_name}; \
  RECORD_USER_SCOPE(titan_range_label_.name())
