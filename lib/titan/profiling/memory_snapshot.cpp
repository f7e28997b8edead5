#include "titan/profiling/memory_snapshot.hpp"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "titan/util/files.hpp"
#include "titan/metrics/format.hpp"
#include "titan/metrics/tensor_memory.hpp"
#include "titan/util/error.hpp"
#include "titan/optim/adam_state.hpp"
#include "titan/util/byte_gauge.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::profiling {

namespace {

int64_t bytes_of(const at::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

// "12.3 MiB" below a GiB, "1.23 GiB" above: the debug model's steps are MiB.
std::string human(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  return b < 1024.0 * 1024 * 1024 ? titan::strprintf("%.1f MiB", b / (1024.0 * 1024))
                                  : titan::strprintf("%.2f GiB", b / (1024.0 * 1024 * 1024));
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TITAN_CHECK(out.good(), "memory snapshot: cannot write ", path);
  out << text;
  TITAN_CHECK(out.good(), "memory snapshot: writing ", path, " failed");
}

}  // namespace

namespace detail {

std::string cuda_history_stacks(const char* cpp_stacks_env) {
  const std::string v = cpp_stacks_env ? cpp_stacks_env : "";
  return v == "1" || v == "true" || v == "yes" ? "all" : "python";
}

}  // namespace detail

MemoryRecorder::MemoryRecorder(int64_t freq, std::string folder, int rank, c10::Device device,
                               std::function<void(const std::string&)> log)
    : freq_(freq), folder_(std::move(folder)), rank_(rank), device_(device), log_(std::move(log)) {
  TITAN_CHECK(freq_ > 0, "[profiling] profile_freq must be > 0");
  if (device_.is_cpu()) metrics::track_cpu_tensor_memory();
#ifdef TITAN_HAS_CUDA
  if (device_.is_cuda())
    detail::cuda_start_memory_history(detail::cuda_history_stacks(std::getenv("TITAN_MEMORY_SNAPSHOT_CPP_STACKS")));
#endif
}

MemoryRecorder::~MemoryRecorder() = default;

void MemoryRecorder::mark(int64_t step, const std::string& phase, const std::vector<at::Tensor>& params,
                          torch::optim::Optimizer* optimizer) {
  if (!records(step)) return;
  if (marks_step_ != step) {
    // The step's first mark: its peak window starts here (what came before
    // belongs to earlier, unrecorded steps).
    marks_.clear();
    marks_step_ = step;
    metrics::reset_tensor_memory_peak(device_);
  }
  MemoryMark m;
  m.phase = phase;
  for (const at::Tensor& p : params) {
    m.parameters += bytes_of(p);
    m.gradients += bytes_of(p.grad());
  }
  if (optimizer) m.optimizer_state = optim::optimizer_state_bytes(*optimizer);
  m.fsdp_gathered = byte_gauge(kFsdpUnshardedGauge).now();  // published by FSDP
  const metrics::TensorMemory tm = metrics::tensor_memory(device_);
  m.total = tm.current_bytes;
  m.peak = std::max(tm.peak_bytes, tm.current_bytes);
  metrics::reset_tensor_memory_peak(device_);
  marks_.push_back(m);
}

void MemoryRecorder::step_end(int64_t step) {
  if (records(step) && marks_step_ == step) write(step, "iteration_" + std::to_string(step));
}

void MemoryRecorder::on_failure(int64_t step) {
  try {
    write(step, "iteration_" + std::to_string(step) + "_exit");
  } catch (const std::exception&) {
    // the step's own error is the one to report
  }
}

void MemoryRecorder::write(int64_t step, const std::string& dir_name) {
  const std::string dir = folder_ + "/" + dir_name;
  TITAN_CHECK(files::make_directories(dir), "memory snapshot: cannot create ", dir);
  const std::string base = dir + "/rank" + std::to_string(rank_);
  const std::string title = titan::strprintf("rank %d, step %lld, %s: tensor memory at the step's boundaries", rank_,
                                               static_cast<long long>(step), device_.str().c_str());
  write_text(base + "_memory_timeline.json", memory_marks_json(marks_).dump(1));
  write_text(base + "_memory_timeline.svg", render_memory_svg(marks_, title));
  files_.push_back(base + "_memory_timeline.json");
  files_.push_back(base + "_memory_timeline.svg");
#ifdef TITAN_HAS_CUDA
  if (device_.is_cuda()) {
    write_text(base + "_memory_snapshot.pickle", detail::cuda_memory_snapshot_pickle());
    files_.push_back(base + "_memory_snapshot.pickle");
  }
#endif
  if (log_) log_(titan::strprintf("memory snapshot: step %lld written to %s_memory_timeline.{json,svg}",
                                    static_cast<long long>(step), base.c_str()));
}

nlohmann::json memory_marks_json(const std::vector<MemoryMark>& marks) {
  nlohmann::json out = nlohmann::json::array();
  for (const MemoryMark& m : marks)
    out.push_back({{"phase", m.phase},
                   {"parameters", m.parameters},
                   {"gradients", m.gradients},
                   {"optimizer_state", m.optimizer_state},
                   {"fsdp_gathered", m.fsdp_gathered},
                   {"other", m.other()},
                   {"total", m.total},
                   {"peak_in_phase", m.peak}});
  return out;
}

std::string render_memory_svg(const std::vector<MemoryMark>& marks, const std::string& title) {
  const int bar_w = 110, gap = 40, left = 70, top = 40, height = 260, legend = 150;
  const int width = left + static_cast<int>(marks.size()) * (bar_w + gap) + legend;
  int64_t top_bytes = 1;
  for (const MemoryMark& m : marks) top_bytes = std::max({top_bytes, m.total, m.peak});
  const auto y_of = [&](double bytes) { return top + height - height * bytes / static_cast<double>(top_bytes); };
  struct Part {
    const char* name;
    const char* colour;
  };
  const Part parts[] = {{"parameters", "#4e79a7"},
                        {"gradients", "#f28e2b"},
                        {"optimizer state", "#59a14f"},
                        {"FSDP gathered", "#b07aa1"},
                        {"other (activations, temporaries)", "#bab0ac"}};
  std::string s = titan::strprintf(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n<text x=\"10\" y=\"20\" font-size=\"13\">%s</text>\n",
      width, top + height + 50, title.c_str());
  s += titan::strprintf("<text x=\"10\" y=\"%d\">%s</text>\n", top + 10, human(top_bytes).c_str());
  for (size_t i = 0; i < marks.size(); ++i) {
    const MemoryMark& m = marks[i];
    const int x = left + static_cast<int>(i) * (bar_w + gap);
    const int64_t values[] = {m.parameters, m.gradients, m.optimizer_state, m.fsdp_gathered,
                              std::max<int64_t>(0, m.other())};
    double below = 0;
    for (size_t k = 0; k < 5; ++k) {
      const double y0 = y_of(below), y1 = y_of(below + static_cast<double>(values[k]));
      s += titan::strprintf("<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"%s\"><title>%s: %lld "
                              "bytes</title></rect>\n",
                              x, y1, bar_w, y0 - y1, parts[k].colour, parts[k].name,
                              static_cast<long long>(values[k]));
      below += static_cast<double>(values[k]);
    }
    const double yp = y_of(static_cast<double>(m.peak));
    s += titan::strprintf("<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e15759\" stroke-width=\"2\">"
                            "<title>peak in the phase: %lld bytes</title></line>\n",
                            x - 5, x + bar_w + 5, yp, yp, static_cast<long long>(m.peak));
    s += titan::strprintf("<text x=\"%d\" y=\"%d\">%s</text>\n<text x=\"%d\" y=\"%d\">%s</text>\n", x,
                            top + height + 15, m.phase.c_str(), x, top + height + 30, human(m.total).c_str());
  }
  const int lx = left + static_cast<int>(marks.size()) * (bar_w + gap);
  for (size_t k = 0; k < 5; ++k)
    s += titan::strprintf("<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%d\" "
                            "y=\"%d\">%s</text>\n",
                            lx, top + 20 * static_cast<int>(k), parts[k].colour, lx + 14,
                            top + 9 + 20 * static_cast<int>(k), parts[k].name);
  s += titan::strprintf("<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#e15759\" stroke-width=\"2\"/><text "
                          "x=\"%d\" y=\"%d\">peak inside the phase</text>\n</svg>\n",
                          lx, lx + 10, top + 105, top + 105, lx + 14, top + 109);
  return s;
}

}  // namespace titan::profiling
