#include "titan/dist/comm_log.hpp"

namespace titan::dist {

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::AllReduce: return "all_reduce";
    case CommOp::AllGather: return "all_gather";
    case CommOp::ReduceScatter: return "reduce_scatter";
    case CommOp::AllToAll: return "all_to_all";
    case CommOp::Broadcast: return "broadcast";
    case CommOp::Reduce: return "reduce";
    case CommOp::Send: return "send";
    case CommOp::Recv: return "recv";
    case CommOp::Barrier: return "barrier";
  }
  return "?";
}

double ring_all_reduce_bytes(double S, int n) { return n <= 1 ? 0.0 : 2.0 * (n - 1) / n * S; }
double all_gather_bytes(double S, int n) { return n <= 1 ? 0.0 : double(n - 1) / n * S; }
double reduce_scatter_bytes(double S, int n) { return n <= 1 ? 0.0 : double(n - 1) / n * S; }
double all_to_all_bytes(double S, int n) { return n <= 1 ? 0.0 : double(n - 1) / n * S; }

double analytic_bytes(CommOp op, double S, int n) {
  switch (op) {
    case CommOp::AllReduce: return ring_all_reduce_bytes(S, n);
    case CommOp::AllGather: return all_gather_bytes(S, n);
    case CommOp::ReduceScatter: return reduce_scatter_bytes(S, n);
    case CommOp::AllToAll: return all_to_all_bytes(S, n);
    // A pipelined ring/tree broadcast or reduce moves about S through every rank.
    case CommOp::Broadcast:
    case CommOp::Reduce: return n <= 1 ? 0.0 : S;
    case CommOp::Send: return S;
    case CommOp::Recv:
    case CommOp::Barrier: return 0.0;
  }
  return 0.0;
}

double bus_bandwidth_factor(CommOp op, int n) {
  if (n <= 1) return 0.0;
  switch (op) {
    case CommOp::AllReduce: return 2.0 * (n - 1) / n;
    case CommOp::AllGather:
    case CommOp::ReduceScatter:
    case CommOp::AllToAll: return double(n - 1) / n;
    default: return 1.0;
  }
}

CommLog::CommLog() : epoch_(std::chrono::steady_clock::now()) {}

CommLog& CommLog::instance() {
  static CommLog log;
  return log;
}

void CommLog::record(CommRecord r) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  records_.push_back(std::move(r));
  // A long training job issues thousands of ops per step: keep a window,
  // not all of them (the programs that read the log look at recent steps).
  if (records_.size() > kMaxRecords) records_.pop_front();
}

void CommLog::begin_step(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  step_ = step;
}

int64_t CommLog::current_step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return step_;
}

double CommLog::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - epoch_).count();
}

std::vector<CommRecord> CommLog::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {records_.begin(), records_.end()};
}

std::vector<CommRecord> CommLog::records_of_step(int64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CommRecord> out;
  for (const auto& r : records_)
    if (r.step == step) out.push_back(r);
  return out;
}

std::map<std::string, CommTotals> CommLog::step_totals(int64_t step) const {
  std::map<std::string, CommTotals> totals;
  for (const auto& r : records_of_step(step)) {
    for (const std::string& key : {std::string(comm_op_name(r.op)), std::string("all")}) {
      CommTotals& t = totals[key];
      t.count += 1;
      t.payload_bytes += r.payload_bytes;
      t.wire_bytes += r.wire_bytes;
      t.time_us += r.end_us - r.start_us;
    }
  }
  return totals;
}

void CommLog::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  records_.clear();
}

void CommLog::set_enabled(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  enabled_ = on;
}

}  // namespace titan::dist
