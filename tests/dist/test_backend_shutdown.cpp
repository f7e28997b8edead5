// dist::shutdown()'s end of the NCCL groups: every backend the World held is
// shut down (ProcessGroupNCCL: flush, then destroy the communicators) instead
// of being aborted by its destructor with torch's "destroy_process_group()
// was not called" warning. Stand-in backends record the calls, since NCCL
// needs GPUs.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "titan/dist/world.hpp"

namespace {

class RecordingBackend : public c10d::Backend {
 public:
  RecordingBackend(std::string name, std::vector<std::string>* log, bool fails = false)
      : c10d::Backend(0, 1), name_(std::move(name)), log_(log), fails_(fails) {}
  const std::string getBackendName() const override { return "stand-in"; }
  void shutdown() override {
    log_->push_back(name_);
    if (fails_) throw std::runtime_error("communicator " + name_ + " is in error\nsecond line");
  }

 private:
  std::string name_;
  std::vector<std::string>* log_;
  bool fails_;
};

}  // namespace

TEST(BackendShutdown, NewestFirstAndTheListIsEmptied) {
  std::vector<std::string> log;
  std::vector<c10::intrusive_ptr<c10d::Backend>> held = {
      c10::make_intrusive<RecordingBackend>("world", &log), c10::make_intrusive<RecordingBackend>("dp_shard", &log),
      c10::make_intrusive<RecordingBackend>("tp", &log)};
  titan::dist::shutdown_backends(held);
  EXPECT_EQ(log, (std::vector<std::string>{"tp", "dp_shard", "world"}));
  EXPECT_TRUE(held.empty());
}

TEST(BackendShutdown, AFailedShutdownIsReportedAndTheOthersStillEnd) {
  std::vector<std::string> log;
  std::vector<c10::intrusive_ptr<c10d::Backend>> held = {
      c10::make_intrusive<RecordingBackend>("world", &log),
      c10::make_intrusive<RecordingBackend>("tp", &log, /*fails=*/true),
      c10::make_intrusive<RecordingBackend>("cp", &log)};
  testing::internal::CaptureStderr();
  titan::dist::shutdown_backends(held);
  const std::string err = testing::internal::GetCapturedStderr();
  std::printf("stderr: %s", err.c_str());
  EXPECT_EQ(log, (std::vector<std::string>{"cp", "tp", "world"}));
  EXPECT_EQ(err, "[titan] warning: a stand-in group's shutdown failed: communicator tp is in error\n");
  EXPECT_TRUE(held.empty());
}

TEST(BackendShutdown, NothingHeldIsNothingToDo) {
  std::vector<c10::intrusive_ptr<c10d::Backend>> held;
  titan::dist::shutdown_backends(held);
  EXPECT_TRUE(held.empty());
}
