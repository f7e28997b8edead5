#include "titan/checkpoint/tensor_stream.hpp"

#include <ATen/ATen.h>

#include <chrono>
#include <memory>

#include "titan/checkpoint/dcp.hpp"
#include "titan/util/error.hpp"

namespace titan::checkpoint {

int64_t TensorStream::numel() const {
  int64_t n = 0;
  for (const auto& [name, t] : layout) n += t.numel();
  return n;
}

std::map<std::string, at::Tensor> TensorStream::read_all() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : layout) out.emplace(name, read(name));
  return out;
}

at::Tensor meta_like(const at::Tensor& t) {
  return at::empty(t.sizes(), at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta));
}

TensorStream stream_of(const std::map<std::string, at::Tensor>& tensors) {
  TensorStream s;
  for (const auto& [name, t] : tensors) s.layout.emplace(name, meta_like(t));
  // A copy of the map holds references to the same tensors, not their data.
  s.read = [tensors](const std::string& name) { return tensors.at(name); };
  return s;
}

TensorStream checkpoint_stream(const CheckpointInfo& ckpt) {
  const std::map<std::string, SavedTensor> saved = model_tensor_index(ckpt);
  check_checkpoint_files(ckpt);
  TensorStream s;
  for (const auto& [name, t] : saved)
    s.layout.emplace(name, at::empty(t.shape, at::TensorOptions().dtype(t.dtype).device(at::kMeta)));
  s.read = [ckpt, saved](const std::string& name) { return read_model_tensor(ckpt, name, saved.at(name)); };
  return s;
}

TensorStream cast_stream(TensorStream stream, at::ScalarType dtype) {
  for (auto& [name, t] : stream.layout) t = t.to(dtype);
  stream.read = [read = std::move(stream.read), dtype](const std::string& name) { return read(name).to(dtype); };
  return stream;
}

TensorStream with_progress(TensorStream stream, double interval_s,
                           std::function<void(const StreamProgress&)> report) {
  using Clock = std::chrono::steady_clock;
  struct State {
    StreamProgress progress;
    Clock::time_point start = Clock::now(), last = start;
  };
  auto state = std::make_shared<State>();
  for (const auto& [name, t] : stream.layout) {
    ++state->progress.tensors;
    state->progress.bytes += t.numel() * static_cast<int64_t>(t.element_size());
  }
  stream.read = [read = std::move(stream.read), state, interval_s, report = std::move(report),
                 layout = stream.layout](const std::string& name) {
    at::Tensor value = read(name);
    const at::Tensor& t = layout.at(name);
    StreamProgress& p = state->progress;
    ++p.tensors_read;
    p.bytes_read += t.numel() * static_cast<int64_t>(t.element_size());
    const Clock::time_point now = Clock::now();
    if (std::chrono::duration<double>(now - state->last).count() >= interval_s) {
      state->last = now;
      p.seconds = std::chrono::duration<double>(now - state->start).count();
      report(p);
    }
    return value;
  };
  return stream;
}

}  // namespace titan::checkpoint
