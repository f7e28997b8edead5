#include "titan/profiling/trace_profiler.hpp"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <set>

#include "titan/util/files.hpp"
#include "titan/metrics/format.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::profiling {

namespace kineto = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

void ProfileSchedule::validate() const {
  TITAN_CHECK(freq > 0, "[profiling] profile_freq must be > 0, got ", freq);
  TITAN_CHECK(warmup >= 0, "[profiling] profiler_warmup must be >= 0, got ", warmup);
  TITAN_CHECK(active >= 1, "[profiling] profiler_active must be >= 1, got ", active);
  TITAN_CHECK(warmup + active <= freq, "[profiling] profiler_warmup + profiler_active (", warmup, " + ", active,
              ") must not exceed profile_freq (", freq, ")");
}

// Position of a 1-based step in its window: 1..freq.
static int64_t position(const ProfileSchedule& s, int64_t step) { return (step - 1) % s.freq + 1; }

bool ProfileSchedule::is_active(int64_t step) const { return position(*this, step) > freq - active; }

bool ProfileSchedule::starts_warmup(int64_t step) const { return position(*this, step) == freq - active - warmup + 1; }

bool ProfileSchedule::ends_window(int64_t step) const { return position(*this, step) == freq; }

namespace {
ProfilerConfig config() {
  // Shapes make the trace's op table readable; memory and stacks cost too
  // much per op to be on by default.
  return ProfilerConfig(ProfilerState::KINETO, /*report_input_shapes=*/true, /*profile_memory=*/false,
                        /*with_stack=*/false, /*with_flops=*/true, /*with_modules=*/false);
}
std::set<ActivityType> activities(bool cuda) {
  std::set<ActivityType> a = {ActivityType::CPU};
  if (cuda) a.insert(ActivityType::CUDA);
  return a;
}
}  // namespace

TraceProfiler::TraceProfiler(ProfileSchedule schedule, std::string folder, int rank, bool cuda,
                             std::function<void(const std::string&)> log)
    : schedule_(schedule), folder_(std::move(folder)), rank_(rank), cuda_(cuda), log_(std::move(log)) {
  schedule_.validate();
  // A CPU job with the CUDA build of LibTorch: Kineto would probe for GPUs
  // and log "gpuGetDeviceCount failed" as an error. Its log level comes from
  // the environment, read once when Kineto starts (the user's setting wins).
  if (!cuda_) ::setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);  // 5: fatal only
}

TraceProfiler::~TraceProfiler() {
  step_range_.reset();
  if (recording_) {
    try {
      kineto::disableProfiler();  // an interrupted window: nothing written
    } catch (...) {
    }
  }
}

void TraceProfiler::step_begin(int64_t step) {
  if (schedule_.starts_warmup(step) && !prepared_ && !recording_) {
    // Kineto's warm-up: its buffers and (on a GPU) CUPTI set up outside
    // the recorded steps, whose timings would otherwise include it.
    kineto::prepareProfiler(config(), activities(cuda_));
    prepared_ = true;
  }
  if (!schedule_.is_active(step)) return;
  if (!recording_) {
    if (!prepared_) kineto::prepareProfiler(config(), activities(cuda_));
    kineto::enableProfiler(config(), activities(cuda_), {at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE});
    recording_ = true;
    prepared_ = false;
  }
  // torch.profiler's step marker, so that Perfetto shows one slice per step.
  step_range_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (step_range_->isActive()) step_range_->before("ProfilerStep#" + std::to_string(step));
}

void TraceProfiler::step_end(int64_t step) {
  step_range_.reset();
  if (!recording_ || !schedule_.ends_window(step)) return;
  if (cuda_) {
    // The step's last kernels (the optimizer's) are still queued when the
    // host gets here; Kineto keeps only what finished before it stops, so
    // wait for them, as torch.profiler does before it stops.
    const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    impl->synchronizeDevice(impl->getDevice().index());
  }
  std::unique_ptr<kineto::ProfilerResult> result = kineto::disableProfiler();
  recording_ = false;
  const std::string dir = folder_ + "/iteration_" + std::to_string(step);
  TITAN_CHECK(files::make_directories(dir), "profiling: cannot create ", dir);
  const std::string path = dir + "/rank" + std::to_string(rank_) + "_trace.json";
  result->save(path);
  traces_.push_back(path);
  if (log_) log_(titan::strprintf("profiling: trace of step %lld written to %s", static_cast<long long>(step),
                                    path.c_str()));
}

}  // namespace titan::profiling
