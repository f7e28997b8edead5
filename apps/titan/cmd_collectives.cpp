// `titan collectives`: a first look at communication. Every rank starts with
// a small tensor that shows its rank, runs each collective once, and prints
// what it holds afterwards next to the bytes the analytic formula predicts.
#include <ATen/ATen.h>

#include <cstdio>
#include <sstream>

#include "commands.hpp"
#include "titan/dist/comm_log.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/program.hpp"

namespace titan::cli {
namespace {

std::string show(const at::Tensor& t) {
  std::ostringstream os;
  at::Tensor flat = t.flatten().to(at::kDouble);
  os << "[";
  for (int64_t i = 0; i < flat.numel(); ++i) os << (i ? " " : "") << flat[i].item<double>();
  os << "]";
  return os.str();
}

}  // namespace

static int cmd_collectives(int argc, char** argv) {
  return run_main(argc, argv, [](int, char**) {
    const dist::World& world = dist::init_distributed({.device = "cpu"});
    const dist::ProcessGroup& g = *world.group();
    const int r = world.rank(), n = world.size();
    auto mine = [&](int64_t len) { return at::arange(len, at::kFloat) + 10.0 * r; };
    auto say = [&](const char* what, const at::Tensor& t) {
      std::printf("%-15s %s\n", what, show(t).c_str());
    };

    say("start", mine(n));
    at::Tensor x = mine(n);
    g.all_reduce(x);
    say("all_reduce", x);
    say("all_gather", g.all_gather(mine(2)));
    say("reduce_scatter", g.reduce_scatter(mine(2 * n)));
    say("all_to_all", g.all_to_all(mine(n), 0, 0));
    at::Tensor b = mine(n);
    g.broadcast(b, 0);
    say("broadcast(0)", b);
    std::fflush(stdout);
    g.barrier();

    if (r == 0) {
      std::printf("\n%-15s %10s %6s %14s %10s\n", "op", "payload B", "ranks", "analytic B/rank", "time us");
      for (const auto& rec : dist::CommLog::instance().records()) {
        if (rec.op == dist::CommOp::Barrier) continue;
        std::printf("%-15s %10lld %6d %14lld %10.0f\n", dist::comm_op_name(rec.op), (long long)rec.payload_bytes,
                    rec.group_size, (long long)rec.wire_bytes, rec.end_us - rec.start_us);
      }
    }
    return 0;
  });
}

}  // namespace titan::cli

TITAN_COMMAND("collectives", titan::cli::cmd_collectives, "run every collective once and print what each rank holds");
