// `titan flight-recorder FOLDER`: reads the flight recorder's dumps of a job
// (one JSON file per rank, written when a collective failed or timed out,
// on a fatal signal or on SIGUSR1) and prints the first collective where
// the ranks disagree and the ranks behind.
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "titan/dist/flight_analysis.hpp"
#include "titan/launch/program.hpp"
#include "titan/util/error.hpp"

namespace titan::cli {

static int cmd_flight_recorder(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    TITAN_CHECK(argc == 3 && std::string(argv[2]) != "--help",
                "usage: titan flight-recorder FOLDER (the job's dump_folder/comm_traces, [comm] save_traces_folder)");
    const auto dumps = dist::load_flight_dumps(argv[2]);
    std::printf("%s", dist::format_flight_analysis(dist::analyse_flight_traces(dumps)).c_str());
    return 0;
  });
}

TITAN_COMMAND("flight-recorder", cmd_flight_recorder,
              "read the ranks' flight-recorder dumps in FOLDER: the first collective where they disagree");

}  // namespace titan::cli
