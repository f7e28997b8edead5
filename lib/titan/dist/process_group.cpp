#include "titan/dist/process_group.hpp"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Logging.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "titan/dist/flight_recorder.hpp"
#include "titan/dist/heartbeat.hpp"
#include "titan/dist/quiet_c10_logs.hpp"
#include "titan/dist/work_wait.hpp"
#include "titan/util/range.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strings.hpp"

// The group's own ranges in profiler traces. Unlike TITAN_PROFILE_RANGE
// they do not replace the caller's range as the flight recorder's label of
// the op (that label should say what the op was for, not that it is one),
// and their name is built only while a profiler records.
#define TITAN_COMM_RANGE(name) RECORD_USER_SCOPE(name)

namespace titan::dist {
namespace {

constexpr const char* kFailurePrefix = "titan/failed/";

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return c10d::ReduceOp::SUM;
    case ReduceOp::Max: return c10d::ReduceOp::MAX;
    case ReduceOp::Min: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

void finish_avg(at::Tensor& t, ReduceOp op, int n) {
  if (op != ReduceOp::Avg || n == 1) return;
  if (at::isIntegralType(t.scalar_type(), /*includeBool=*/false))
    t.div_(n, "floor");
  else
    t.div_(n);
}

int64_t nbytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }


}  // namespace

// ---------------------------------------------------------------- FailureBoard

void FailureBoard::report(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                          const std::string& message, bool knock_on) {
  if (!store) return;
  QuietC10Logs quiet;
  try {
    store->set(kFailurePrefix + std::to_string(rank), (knock_on ? "K" : "R") + first_line(message));
  } catch (...) {
    // The store lives on rank 0; if it is gone there is nobody to tell.
  }
}

bool FailureBoard::all_reported(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks) {
  if (!store) return true;
  QuietC10Logs quiet;
  try {
    for (int r : ranks)
      if (!store->check({kFailurePrefix + std::to_string(r)})) return false;
  } catch (...) {
    return true;
  }
  return true;
}

namespace {

// FailureBoard::describe, optionally without knock-on reports: a rank
// whose flight word names the collective it waited in says more than its
// peers' own timeouts would (which repeat its error, one per peer).
std::string peer_reports(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                         std::chrono::milliseconds wait, bool with_knock_on);

}  // namespace

std::string FailureBoard::describe(const c10::intrusive_ptr<c10d::Store>& store,
                                   const std::vector<int>& ranks, std::chrono::milliseconds wait) {
  return peer_reports(store, ranks, wait, /*with_knock_on=*/true);
}

namespace {

std::string peer_reports(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                         std::chrono::milliseconds wait, bool with_knock_on) {
  if (!store) return "";
  QuietC10Logs quiet;
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (true) {
    std::string own, knock_on;
    try {
      for (int r : ranks) {
        std::string key = kFailurePrefix + std::to_string(r);
        if (!store->check({key})) continue;
        auto bytes = store->get(key);
        std::string value(bytes.begin(), bytes.end());
        std::string& into = !value.empty() && value[0] == 'K' ? knock_on : own;
        if (!into.empty()) into += "; ";
        into += "rank " + std::to_string(r) + " failed: " + value.substr(1);
      }
    } catch (...) {
      return "the rendezvous store on rank 0 is gone (rank 0 exited)";
    }
    if (!own.empty()) return own;
    if (std::chrono::steady_clock::now() >= deadline) return with_knock_on ? knock_on : "";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

// ----------------------------------------------------------------- PendingWork

namespace {

// True once the current CUDA stream has run past this moment: an event
// recorded there now. Empty where no CUDA device answers (the caller then
// counts the op as completed).
std::function<bool()> current_stream_passed_probe() {
  try {
    const c10::impl::DeviceGuardImplInterface* cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    auto event = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
    event->record(cuda->getStream(cuda->getDevice()));
    return [event] { return event->query(); };
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace

std::chrono::milliseconds work_wait_timeout(const std::string& backend_name, std::chrono::milliseconds group_timeout) {
  if (backend_name == "nccl") return ::kNoTimeout;  // Work.hpp declares it at global scope
  return group_timeout;
}

PendingWork::PendingWork(const ProcessGroup* group, CommRecord record,
                         c10::intrusive_ptr<c10d::Work> work, std::function<void()> on_done)
    : group_(group), record_(std::move(record)), work_(std::move(work)), on_done_(std::move(on_done)) {}

void PendingWork::wait() {
  if (done_) return;
  for (int64_t id : record_.flight_ids) FlightRecorder::instance().started(id);
  const auto wait_timeout = work_wait_timeout(group_->backend()->getBackendName(), group_->timeout());
  try {
    // NCCL: the current stream waits, the host does not (work_wait_timeout
    // says why); the CommRecord's end then marks when the wait was queued,
    // not when the transfer finished. Gloo: blocks, bounded by the timeout.
    work_->wait(wait_timeout);
  } catch (const std::exception& e) {
    done_ = true;
    group_->fail(record_, e.what());
  }
  done_ = true;
  // Gloo's worker thread marks the work complete and only then drops its
  // reference to it — and with it to the buffers the work holds (e.g. an
  // all-gather's contiguous input). Left alone, those are freed a moment
  // after wait() returns, on the worker's time, and memory readings
  // (metrics/tensor_memory) differ from run to run by a collective's
  // buffers. Waiting (briefly, bounded) until this is the last reference
  // makes a collective's temporaries die when the call returns. (Gloo's
  // reduce-scatter is an inner all-reduce of a copy of the input, a work we
  // never see: that copy can still die late. NCCL keeps its works in the
  // watchdog's list for longer and is left as it is.)
  if (group_->backend()->getBackendName() == "gloo") {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
    while (work_.use_count() > 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  }
  if (on_done_) on_done_();
  // Gloo's wait returns when the work is done. NCCL's (no timeout) returns
  // once the current stream waits for it: the flight recorder then asks an
  // event recorded on that stream until it has passed, so that a dump after
  // a hang shows the collective still running, not completed. Not the work
  // itself: ProcessGroupNCCL's work holds the collective's output, which the
  // recorder would keep alive until the GPU caught up (an FSDP forward's
  // host runs ahead by many units, each gathered unit held).
  auto& recorder = FlightRecorder::instance();
  std::function<bool()> probe;
  if (wait_timeout == ::kNoTimeout && !work_->isCompleted()) probe = current_stream_passed_probe();
  for (int64_t id : record_.flight_ids) {
    if (probe) recorder.completes_when(id, probe);
    else recorder.completed(id);
  }
  record_.end_us = CommLog::instance().now_us();
  CommLog::instance().record(record_);
}

// ---------------------------------------------------------------- ProcessGroup

ProcessGroup::ProcessGroup(std::string name, std::vector<int> global_ranks, int group_rank,
                           c10::intrusive_ptr<c10d::Backend> backend,
                           c10::intrusive_ptr<c10d::Store> job_store,
                           std::chrono::milliseconds timeout)
    : name_(std::move(name)),
      ranks_(std::move(global_ranks)),
      rank_(group_rank),
      backend_(std::move(backend)),
      job_store_(std::move(job_store)),
      timeout_(timeout) {
  FlightRecorder::instance().register_group(name_, ranks_);
}

std::string ProcessGroup::describe() const {
  std::ostringstream os;
  os << "group '" << name_ << "' (ranks [";
  for (size_t i = 0; i < ranks_.size(); ++i) os << (i ? ", " : "") << ranks_[i];
  os << "], this rank " << ranks_[rank_] << ")";
  return os.str();
}

namespace {

constexpr const char* kArrivedPrefix = "titan/flight/";

// The flight recorder's part of a failed collective's error: this rank's
// buffer goes to disk, and it leaves word in the job's store of the
// collective (group, sequence number) it was waiting in, so that peers
// failing on the same collective can tell who was with them.
struct FlightWord {
  int64_t seq = 0;  // 0: not a recorded collective
  std::string op;
  std::string dump;
};

FlightWord leave_flight_word(const c10::intrusive_ptr<c10d::Store>& store, const std::string& group, int global_rank,
                             const CommRecord& record) {
  FlightWord word;
  auto& recorder = FlightRecorder::instance();
  word.dump = recorder.dump_to_target();
  FlightEntry entry;
  if (record.flight_ids.empty() || !recorder.find(record.flight_ids.front(), entry) || entry.p2p) return word;
  word.seq = entry.seq;
  word.op = comm_op_name(entry.op);
  if (!store) return word;
  QuietC10Logs quiet;
  try {
    store->set(kArrivedPrefix + group + "/" + std::to_string(global_rank), std::to_string(word.seq));
  } catch (...) {
  }
  return word;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

// "rank 2 is gone (its heartbeat stopped: ...)" / "ranks 2, 5 are gone (...)".
std::string heartbeats_stopped(const std::vector<int>& gone) {
  return gone.size() > 1 ? "ranks " + rank_list(gone) + " are gone (their heartbeats stopped: killed, stopped or lost with their host)"
                         : "rank " + rank_list(gone) + " is gone (its heartbeat stopped: killed, stopped or lost with its host)";
}

// "collective #57 (all_reduce) of this group: ranks 1, 3 waited in it too;
// rank 2 never reported reaching it", from the peers' words in the store.
// The heartbeats (nullopt when none could be read) tell a dead peer from a
// live one: `silent` are the peers whose heartbeat stopped, `gone` those of
// them that left no word either (killed, stopped, lost).
std::string flight_summary(const c10::intrusive_ptr<c10d::Store>& store, const std::string& group,
                           const std::vector<int>& peers, const FlightWord& word,
                           const std::optional<std::vector<int>>& silent,
                           const std::optional<std::vector<int>>& gone) {
  if (word.seq == 0) return "";
  std::vector<int> with_us, missing;
  std::vector<std::string> elsewhere;
  bool heard = store != nullptr;  // false when the store (on rank 0) is gone: then nobody can be named
  if (store) {
    QuietC10Logs quiet;
    try {
      for (int r : peers) {
        const std::string key = kArrivedPrefix + group + "/" + std::to_string(r);
        if (!store->check({key})) {
          missing.push_back(r);
          continue;
        }
        auto bytes = store->get(key);
        const std::string seq(bytes.begin(), bytes.end());
        if (seq == std::to_string(word.seq)) with_us.push_back(r);
        else elsewhere.push_back("rank " + std::to_string(r) + " failed in #" + seq);
      }
    } catch (...) {
      heard = false;
    }
  }
  if (!heard) with_us.clear(), elsewhere.clear(), missing.clear();
  auto in = [](const std::optional<std::vector<int>>& ranks, int r) {
    return ranks && std::find(ranks->begin(), ranks->end(), r) != ranks->end();
  };
  std::vector<int> missing_gone, missing_alive, missing_left;
  for (int r : missing)
    (in(gone, r) ? missing_gone : in(silent, r) ? missing_left : missing_alive).push_back(r);
  std::ostringstream os;
  os << "flight recorder: this group's collective #" << word.seq << " (" << word.op << ")";
  if (!with_us.empty()) os << "; rank" << (with_us.size() > 1 ? "s " : " ") << rank_list(with_us) << " waited in it too";
  for (const auto& e : elsewhere) os << "; " << e;
  if (!missing_gone.empty())
    os << "; rank" << (missing_gone.size() > 1 ? "s " : " ") << rank_list(missing_gone)
       << " never reported reaching it; " << heartbeats_stopped(missing_gone);
  if (!missing_alive.empty())
    os << "; rank" << (missing_alive.size() > 1 ? "s " : " ") << rank_list(missing_alive)
       << " never reported reaching it" << (silent ? " (alive: its heartbeat runs)" : "");
  if (!missing_left.empty())
    os << "; rank" << (missing_left.size() > 1 ? "s " : " ") << rank_list(missing_left)
       << " never reported reaching it (failed elsewhere and exited)";
  if (!word.dump.empty()) os << " (this rank's trace: " << word.dump << ")";
  return os.str();
}

}  // namespace

void ProcessGroup::fail(const CommRecord& record, const std::string& backend_message) const {
  const double elapsed_s = (CommLog::instance().now_us() - record.start_us) / 1e6;
  std::vector<int> peers;
  for (int r : ranks_)
    if (r != ranks_[rank_]) peers.push_back(r);
  // The peers' heartbeats now, to see after the reports' grace period whose
  // stood still (gone) and whose moved (alive, but not where we are).
  const Heartbeat* heartbeat = current_heartbeat();
  HeartbeatReading beats_before;
  if (heartbeat) beats_before = heartbeat->read(peers);
  const FlightWord word = leave_flight_word(job_store_, name_, ranks_[rank_], record);
  // A peer that failed writes its reason before its sockets close, but give
  // the store a moment in case our error raced ahead of its report (and
  // peers waiting in the same collective time to leave their flight word).
  std::string who = peer_reports(job_store_, peers, std::chrono::milliseconds(2000),
                                 /*with_knock_on=*/word.seq == 0);
  std::optional<std::vector<int>> silent, gone;
  if (heartbeat) silent = heartbeat->silent_since(beats_before, heartbeat->judging_window());
  // A silent peer that left word (a failure report, or a flight word here)
  // failed like us and exited: it is accounted for, not gone unexplained.
  if (silent && job_store_) {
    QuietC10Logs quiet;
    try {
      gone.emplace();
      for (int r : *silent)
        if (!job_store_->check({kFailurePrefix + std::to_string(r)}) &&
            !job_store_->check({kArrivedPrefix + name_ + "/" + std::to_string(r)}))
          gone->push_back(r);
    } catch (...) {
      silent.reset();
      gone.reset();
    }
  }
  const std::string flight = flight_summary(job_store_, name_, peers, word, silent, gone);
  std::ostringstream os;
  os << comm_op_name(record.op) << " on " << describe() << " failed after " << elapsed_s << " s (timeout "
     << timeout_.count() / 1000.0 << " s): ";
  if (!who.empty())
    os << who << " [backend: " << first_line(backend_message) << "]";
  else if (!flight.empty())  // it names the peers that never came, gone or alive
    os << first_line(backend_message) << " (no peer reported a failure)";
  else if (gone && !gone->empty())
    os << first_line(backend_message) << " (no peer reported a failure; " << heartbeats_stopped(*gone) << ")";
  else
    os << first_line(backend_message) << " (no peer reported a failure: one may have been killed or be stuck)";
  if (!flight.empty()) os << "; " << flight;
  throw CommError(os.str());
}

CommRecord ProcessGroup::start_record(CommOp op, int64_t payload_bytes, const at::Tensor& input,
                                      const at::Tensor& output, int peer) const {
  CommRecord r;
  r.op = op;
  r.group = name_;
  r.group_size = size();
  r.payload_bytes = payload_bytes;
  r.wire_bytes = static_cast<int64_t>(analytic_bytes(op, double(payload_bytes), size()));
  r.start_us = CommLog::instance().now_us();
  // The step it starts in: an asynchronous op is recorded when it is
  // waited for, which may be after the next begin_step.
  r.step = CommLog::instance().current_step();
  // Issued now, for the flight recorder (a batch of P2P ops adds its own).
  const bool p2p = op == CommOp::Send || op == CommOp::Recv;
  if (input.defined() || !p2p)
    r.flight_ids.push_back(FlightRecorder::instance().scheduled(name_, op, p2p, peer >= 0 ? global_rank(peer) : -1,
                                                                input, output));
  return r;
}

namespace {

// Launches one backend call of `group` and returns its pending work, with
// `record` for the CommLog and `on_done` run after the wait (it may hold
// the buffers alive). A backend exception becomes the group's one-line
// error; a titan::Error passes through. Every collective and P2P op goes
// through here.
std::shared_ptr<PendingWork> start_async(const ProcessGroup& group, CommRecord record,
                                         const std::function<c10::intrusive_ptr<c10d::Work>()>& launch,
                                         std::function<void()> on_done) {
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = launch();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    group.fail(record, e.what());
  }
  return std::make_shared<PendingWork>(&group, std::move(record), std::move(work), std::move(on_done));
}

}  // namespace

void ProcessGroup::run(CommRecord record,
                       const std::function<c10::intrusive_ptr<c10d::Work>()>& launch) const {
  // A blocking collective, launch to completion, as one range of the trace.
  TITAN_COMM_RANGE(std::string("c10d::") + comm_op_name(record.op) + " " + name_);
  start_async(*this, std::move(record), launch, nullptr)->wait();
}

void ProcessGroup::all_reduce(at::Tensor& tensor, ReduceOp op) const {
  TITAN_COMM_RANGE("c10d::all_reduce " + name_);
  all_reduce_async(tensor, op)->wait();
}

std::shared_ptr<PendingWork> ProcessGroup::all_reduce_async(at::Tensor tensor, ReduceOp op) const {
  TITAN_COMM_RANGE("c10d::all_reduce_start " + name_);  // the launch; the wait is the caller's
  TITAN_CHECK(tensor.is_contiguous(), "all_reduce on ", describe(), " needs a contiguous tensor");
  std::vector<at::Tensor> tensors{tensor};
  const int n = size();
  return start_async(
      *this,
      start_record(CommOp::AllReduce, nbytes(tensor), tensor),
      [&] {
        c10d::AllreduceOptions opts;
        opts.reduceOp = to_c10d(op);
        opts.timeout = timeout_;
        return backend_->allreduce(tensors, opts);
      },
      [tensor, op, n]() mutable { finish_avg(tensor, op, n); });
}

at::Tensor ProcessGroup::all_gather(const at::Tensor& tensor, int64_t dim) const {
  dim = at::maybe_wrap_dim(dim, tensor.dim());
  at::Tensor input = tensor.movedim(dim, 0).contiguous();
  std::vector<int64_t> out_shape = input.sizes().vec();
  out_shape[0] *= size();
  at::Tensor output = at::empty(out_shape, input.options());
  run(start_record(CommOp::AllGather, nbytes(output), input, output), [&] {
    c10d::AllgatherOptions opts;
    opts.timeout = timeout_;
    return backend_->_allgather_base(output, input, opts);
  });
  // Rank-major along the leading axis is exactly concatenation along `dim`
  // once that axis moves back. For dim != 0 that is a strided view, and
  // made contiguous here, once: every consumer that needs a contiguous
  // tensor would otherwise copy it on its own — a Linear reshapes its input
  // to 2-D, so wq, wk and wv would each copy (and save for backward) the
  // sequence-parallel all-gather of the attention's input.
  if (dim == 0) return output;
  return output.movedim(0, dim).contiguous();
}

std::shared_ptr<PendingWork> ProcessGroup::all_gather_async(const at::Tensor& input, at::Tensor output) const {
  TITAN_CHECK(input.is_contiguous() && output.is_contiguous(), "all_gather on ", describe(),
              " needs contiguous tensors");
  TITAN_CHECK(output.numel() == input.numel() * size() && input.scalar_type() == output.scalar_type(),
              "all_gather on ", describe(), ": output of ", output.numel(), " elements (", output.scalar_type(),
              ") is not ", size(), " inputs of ", input.numel(), " (", input.scalar_type(), ")");
  at::Tensor in = input;  // the backend takes non-const references
  return start_async(
      *this,
      start_record(CommOp::AllGather, nbytes(output), input, output),
      [&] {
        c10d::AllgatherOptions opts;
        opts.timeout = timeout_;
        return backend_->_allgather_base(output, in, opts);
      },
      [input, output]() {});  // holds both buffers until the collective is done
}

at::Tensor ProcessGroup::all_gather_uneven(const at::Tensor& tensor, int64_t dim) const {
  dim = at::maybe_wrap_dim(dim, tensor.dim());
  at::Tensor my_size = at::full({1}, tensor.size(dim), at::TensorOptions().dtype(at::kLong).device(tensor.device()));
  at::Tensor sizes = all_gather(my_size, 0).cpu();
  int64_t max_size = sizes.max().item<int64_t>();
  at::Tensor padded = tensor;
  if (tensor.size(dim) < max_size) {
    std::vector<int64_t> pad_shape = tensor.sizes().vec();
    pad_shape[dim] = max_size - tensor.size(dim);
    padded = at::cat({tensor, at::zeros(pad_shape, tensor.options())}, dim);
  }
  at::Tensor gathered = all_gather(padded, dim);
  std::vector<at::Tensor> parts;
  for (int r = 0; r < size(); ++r)
    parts.push_back(gathered.narrow(dim, r * max_size, sizes[r].item<int64_t>()));
  return at::cat(parts, dim);
}

at::Tensor ProcessGroup::reduce_scatter(const at::Tensor& tensor, int64_t dim, ReduceOp op) const {
  dim = at::maybe_wrap_dim(dim, tensor.dim());
  TITAN_CHECK(tensor.size(dim) % size() == 0, "reduce_scatter on ", describe(), ": size ",
              tensor.size(dim), " of dim ", dim, " does not divide by ", size());
  at::Tensor input = tensor.movedim(dim, 0).contiguous();
  std::vector<int64_t> out_shape = input.sizes().vec();
  out_shape[0] /= size();
  at::Tensor output = at::empty(out_shape, input.options());
  // Rank-major along the leading axis: flat chunk r of the input is exactly
  // member r's slice, so the flat collective does the work.
  reduce_scatter_async(input.view({-1}), output.view({-1}), op)->wait();
  return output.movedim(0, dim);
}

std::shared_ptr<PendingWork> ProcessGroup::reduce_scatter_async(const at::Tensor& input, at::Tensor output,
                                                                ReduceOp op) const {
  TITAN_CHECK(input.is_contiguous() && output.is_contiguous(), "reduce_scatter on ", describe(),
              " needs contiguous tensors");
  TITAN_CHECK(input.numel() == output.numel() * size() && input.scalar_type() == output.scalar_type(),
              "reduce_scatter on ", describe(), ": input of ", input.numel(), " elements (", input.scalar_type(),
              ") does not split into ", size(), " outputs of ", output.numel(), " (", output.scalar_type(), ")");
  at::Tensor in = input;  // the backend takes non-const references
  const int n = size();
  // on_done holds both buffers until the collective is done (the caller
  // may drop its own references right after issuing).
  return start_async(
      *this,
      start_record(CommOp::ReduceScatter, nbytes(input), input, output),
      [&] {
        c10d::ReduceScatterOptions opts;
        opts.reduceOp = to_c10d(op);
        opts.timeout = timeout_;
        return backend_->_reduce_scatter_base(output, in, opts);
      },
      [input, output, op, n]() mutable { finish_avg(output, op, n); });
}

at::Tensor ProcessGroup::all_to_all(const at::Tensor& tensor, int64_t split_dim,
                                    int64_t concat_dim) const {
  split_dim = at::maybe_wrap_dim(split_dim, tensor.dim());
  concat_dim = at::maybe_wrap_dim(concat_dim, tensor.dim());
  const int n = size();
  TITAN_CHECK(tensor.size(split_dim) % n == 0, "all_to_all on ", describe(), ": size ",
              tensor.size(split_dim), " of dim ", split_dim, " does not divide by ", n);
  // [n, chunk...]: row j is the chunk bound for member j.
  at::Tensor input =
      tensor.unflatten(split_dim, {n, tensor.size(split_dim) / n}).movedim(split_dim, 0).contiguous();
  at::Tensor output = at::empty_like(input);
  run(start_record(CommOp::AllToAll, nbytes(input), input, output), [&] {
    c10d::AllToAllOptions opts;
    opts.timeout = timeout_;
    std::vector<int64_t> even;  // empty split sizes: equal chunks along dim 0
    return backend_->alltoall_base(output, input, even, even, opts);
  });
  // Row j came from member j; put rows next to concat_dim and merge the two.
  return output.movedim(0, concat_dim).flatten(concat_dim, concat_dim + 1);
}

void ProcessGroup::broadcast(at::Tensor& tensor, int root) const {
  TITAN_CHECK(tensor.is_contiguous(), "broadcast on ", describe(), " needs a contiguous tensor");
  std::vector<at::Tensor> tensors{tensor};
  run(start_record(CommOp::Broadcast, nbytes(tensor), tensor), [&] {
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = timeout_;
    return backend_->broadcast(tensors, opts);
  });
}

void ProcessGroup::reduce(at::Tensor& tensor, int root, ReduceOp op) const {
  TITAN_CHECK(tensor.is_contiguous(), "reduce on ", describe(), " needs a contiguous tensor");
  std::vector<at::Tensor> tensors{tensor};
  run(start_record(CommOp::Reduce, nbytes(tensor), tensor), [&] {
    c10d::ReduceOptions opts;
    opts.rootRank = root;
    opts.reduceOp = to_c10d(op);
    opts.timeout = timeout_;
    return backend_->reduce(tensors, opts);
  });
  if (rank_ == root) finish_avg(tensor, op, size());
}

void ProcessGroup::send(const at::Tensor& tensor, int dst, int tag) const {
  TITAN_COMM_RANGE("c10d::send " + name_);
  send_async(tensor.contiguous(), dst, tag)->wait();
}

void ProcessGroup::recv(at::Tensor& tensor, int src, int tag) const {
  TITAN_COMM_RANGE("c10d::recv " + name_);
  recv_async(tensor, src, tag)->wait();
}

bool ProcessGroup::stages_p2p(const at::Tensor& tensor) const {
  // TITAN_STAGE_P2P=1 takes the path with CPU tensors too, where the host
  // buffer is a plain copy: how a machine without a GPU tests it.
  static const bool forced = [] {
    const char* v = std::getenv("TITAN_STAGE_P2P");
    return v != nullptr && std::string(v) == "1";
  }();
  return backend_->getBackendName() == "gloo" && (tensor.is_cuda() || forced);
}

namespace {

// A host tensor shaped like `t`, pinned when `t` is on a GPU (so that the
// copies to and from it are DMA transfers).
at::Tensor host_buffer_like(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(t.is_cuda()));
}

}  // namespace

std::shared_ptr<PendingWork> ProcessGroup::send_async(const at::Tensor& tensor, int dst, int tag) const {
  TITAN_CHECK(tensor.is_contiguous(), "send on ", describe(), " needs a contiguous tensor");
  // Gloo sends no CUDA tensor: it sends a host copy (taken now, so that the
  // caller may reuse its buffer once wait() returns, as always).
  const at::Tensor wire = stages_p2p(tensor) ? host_buffer_like(tensor).copy_(tensor) : tensor;
  std::vector<at::Tensor> tensors{wire};
  // on_done keeps the buffer alive while the transfer runs.
  return start_async(
      *this,
      start_record(CommOp::Send, nbytes(tensor), tensor, {}, dst), [&] { return backend_->send(tensors, dst, tag); }, [wire] {});
}

std::shared_ptr<PendingWork> ProcessGroup::recv_async(at::Tensor& tensor, int src, int tag) const {
  TITAN_CHECK(tensor.is_contiguous(), "recv on ", describe(), " needs a contiguous tensor");
  // Gloo receives no CUDA tensor: into a host buffer, copied to `tensor`
  // when the receive is waited.
  const bool staged = stages_p2p(tensor);
  const at::Tensor wire = staged ? host_buffer_like(tensor) : tensor;
  std::vector<at::Tensor> tensors{wire};
  return start_async(
      *this,
      start_record(CommOp::Recv, nbytes(tensor), tensor, {}, src), [&] { return backend_->recv(tensors, src, tag); },
      [tensor, wire, staged]() mutable {
        if (staged) tensor.copy_(wire);
      });
}

std::vector<std::shared_ptr<PendingWork>> ProcessGroup::batch_p2p(const std::vector<P2POp>& ops) const {
  std::vector<std::shared_ptr<PendingWork>> sends;
  if (ops.empty()) return sends;
  // Pipeline stages exchange activations and gradients here: one range per
  // batch (sends issued, receives waited), e.g. "c10d::batch_p2p pp".
  TITAN_COMM_RANGE("c10d::batch_p2p " + name_);
  for (const P2POp& op : ops)
    TITAN_CHECK(op.tensor.is_contiguous(), (op.is_send ? "send" : "recv"), " on ", describe(),
                " needs a contiguous tensor");
  if (backend_->supportsCoalescing()) {
    // One coalesced group (NCCL), waited here: batch_p2p_async's.
    for (const auto& w : batch_p2p_async(ops)) w->wait();
    return sends;
  }
  std::vector<std::shared_ptr<PendingWork>> recvs;
  for (const P2POp& op : ops) {
    at::Tensor t = op.tensor;
    if (op.is_send) sends.push_back(send_async(t, op.peer, op.tag));
    else recvs.push_back(recv_async(t, op.peer, op.tag));
  }
  for (auto& w : recvs) w->wait();
  return sends;
}

std::vector<std::shared_ptr<PendingWork>> ProcessGroup::batch_p2p_async(const std::vector<P2POp>& ops) const {
  std::vector<std::shared_ptr<PendingWork>> works;
  if (ops.empty()) return works;
  for (const P2POp& op : ops)
    TITAN_CHECK(op.tensor.is_contiguous(), (op.is_send ? "send" : "recv"), " on ", describe(),
                " needs a contiguous tensor");
  if (!backend_->supportsCoalescing()) {
    for (const P2POp& op : ops) {
      at::Tensor t = op.tensor;
      works.push_back(op.is_send ? send_async(t, op.peer, op.tag) : recv_async(t, op.peer, op.tag));
    }
    return works;
  }
  // One record for the group, counting what this rank sends (the receives
  // are the peers' sends).
  int64_t sent = 0;
  std::vector<at::Tensor> keep;
  for (const P2POp& op : ops) {
    if (op.is_send) sent += nbytes(op.tensor);
    keep.push_back(op.tensor);
  }
  // The flight recorder keeps each op with its peer; the group's one work
  // completes them all.
  CommRecord record = start_record(CommOp::Send, sent, {});
  for (const P2POp& op : ops)
    record.flight_ids.push_back(FlightRecorder::instance().scheduled(
        name_, op.is_send ? CommOp::Send : CommOp::Recv, /*p2p=*/true, global_rank(op.peer), op.tensor, {}));
  works.push_back(start_async(
      *this,
      std::move(record),
      [&] {
        backend_->startCoalescing();
        for (const P2POp& op : ops) {
          std::vector<at::Tensor> t{op.tensor};
          if (op.is_send) backend_->send(t, op.peer, op.tag);
          else backend_->recv(t, op.peer, op.tag);
        }
        return backend_->endCoalescing();
      },
      [keep] {}));
  return works;
}

void ProcessGroup::barrier() const {
  run(start_record(CommOp::Barrier, 0, {}), [&] {
    c10d::BarrierOptions opts;
    opts.timeout = timeout_;
    return backend_->barrier(opts);
  });
}

}  // namespace titan::dist
