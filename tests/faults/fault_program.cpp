// A program that misbehaves on purpose, for the fault tests:
//   fault_program MODE RANK [TIMEOUT_S [TRACE_FOLDER]]
// runs ten all-reduces on every rank (the i-th of 1024 + i floats); at the
// fourth, rank RANK
//   throw: throws a titan::Error ("injected failure"),
//   exit:  calls std::exit(3) without shutting down,
//   hang:  sleeps for ten minutes,
//   skip:  skips it (its fourth all-reduce is the others' fifth),
//   size:  all-reduces 2048 floats instead,
//   stop:  stops itself (SIGSTOP: alive to its launcher, but its
//          heartbeat stands still, as a rank on a lost host), while every
//          other rank sleeps 120 s before its fourth all-reduce: blocked
//          outside any collective, as a GPU rank in a device
//          synchronisation once NCCL queued the collective (only the peer
//          watch can name the stopped rank then),
//   failstop: as stop, but first leaves word on the FailureBoard, as a
//          rank that failed and then hung in its teardown (the watch
//          quotes that word),
//   ok:    does nothing special.
// With TRACE_FOLDER, the flight recorder keeps the ops and every rank
// writes TRACE_FOLDER/rank_<r>.json when a collective fails and when it
// finishes (a rank that skipped one may finish without an error).
//   pipeline: instead of all-reduces, trains one 1F1B pipeline step over all
//          ranks, and rank RANK throws at its fourth action (mid-schedule,
//          while its neighbours wait on a send or receive).
// The other ranks must stop on their own, non-zero, naming RANK.
#include <ATen/ATen.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "titan/dist/flight_recorder.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/program.hpp"
#include "titan/util/error.hpp"
#include "titan/verify/pipeline_technique.hpp"

int main(int argc, char** argv) {
  return titan::run_main(argc, argv, [](int argc, char** argv) {
    TITAN_CHECK(argc >= 3, "usage: fault_program throw|exit|hang|skip|size|stop|failstop|pipeline|ok RANK [TIMEOUT_S [TRACE_FOLDER]]");
    const std::string mode = argv[1];
    const int bad_rank = std::atoi(argv[2]);
    titan::dist::InitOptions options;
    options.device = "cpu";
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>((argc > 3 ? std::atof(argv[3]) : 30.0) * 1000));
    if (argc > 4) {
      options.flight_recorder_entries = 100;
      options.flight_recorder_folder = argv[4];
    }
    const auto& world = titan::dist::init_distributed(options);
    if (mode == "pipeline") {
      titan::verify::RunSpec spec;
      spec.model.n_layers = world.size();
      titan::verify::PipelineRunOptions o;
      o.kind = titan::pp::ScheduleKind::OneFOneB;
      o.microbatches = 4;
      int actions = 0;
      o.runtime.before_action = [&](const titan::pp::Action& a) {
        if (world.rank() == bad_rank && ++actions == 4) throw titan::Error("injected failure before " + a.str());
      };
      titan::verify::PipelineRun run = titan::verify::build_pipeline_run(spec, world.group(), o);
      auto batch = titan::verify::local_micro_batches(spec, 1, 0, 1).front();
      run.runtime->step(batch.inputs, batch.labels);
      std::printf("rank %d finished\n", world.rank());
      return 0;
    }
    for (int i = 0; i < 10; ++i) {
      if (i == 3 && world.rank() == bad_rank) {
        if (mode == "throw") throw titan::Error("injected failure");
        if (mode == "exit") std::exit(3);
        if (mode == "hang") std::this_thread::sleep_for(std::chrono::minutes(10));
        if (mode == "skip") continue;
        if (mode == "failstop") titan::dist::report_failure("injected failure, then its exit hung");
        if (mode == "stop" || mode == "failstop") ::raise(SIGSTOP);
      }
      if (i == 3 && (mode == "stop" || mode == "failstop")) std::this_thread::sleep_for(std::chrono::seconds(120));
      const int64_t n = i == 3 && mode == "size" && world.rank() == bad_rank ? 2048 : 1024 + i;
      at::Tensor x = at::ones({n});
      world.group()->all_reduce(x);
    }
    titan::dist::FlightRecorder::instance().dump_to_target();
    std::printf("rank %d finished\n", world.rank());
    return 0;
  });
}
