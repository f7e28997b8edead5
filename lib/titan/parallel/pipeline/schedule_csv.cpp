#include "titan/parallel/pipeline/schedule_csv.hpp"

#include <fstream>

#include "titan/util/error.hpp"

namespace titan::pp {

std::vector<RankActions> read_schedule_csv(const std::string& path, const ScheduleSpec& spec) {
  std::ifstream in(path);
  TITAN_CHECK(in.is_open(), "pipeline schedule ", path, ": cannot open it (no such file, or not readable)");
  std::vector<RankActions> ranks;
  std::string line;
  for (int row = 1; std::getline(in, line); ++row) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a file written on Windows
    if (line.find_first_not_of(" \t,") == std::string::npos && row > spec.pp) continue;  // trailing blank lines
    TITAN_CHECK(row <= spec.pp, "pipeline schedule ", path, " row ", row, ": the pipeline has ", spec.pp,
                " ranks, so the file has one row each, not more");
    const int rank = row - 1;
    RankActions actions;
    size_t start = 0;
    for (int cell = 1;; ++cell) {
      const size_t comma = line.find(',', start);
      std::string text = line.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const size_t b = text.find_first_not_of(" \t"), e = text.find_last_not_of(" \t");
      text = b == std::string::npos ? std::string() : text.substr(b, e - b + 1);
      if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = text.substr(1, text.size() - 2);
      if (!text.empty()) {
        const std::string where =
            "pipeline schedule " + path + " row " + std::to_string(row) + " (rank " + std::to_string(rank) + ") cell " +
            std::to_string(cell) + ": ";
        Action a;
        try {
          a = parse_action(text);
        } catch (const Error& e) {
          throw Error(where + e.what());
        }
        TITAN_CHECK(a.is_compute(), where, "'", a.str(), "' is a send or receive: the file holds compute actions "
                    "only (F, B, I, W; torch's \"compute_only\" format), titan places the messages");
        TITAN_CHECK(a.stage < spec.num_stages(), where, "'", a.str(), "' names stage ", a.stage, " of a pipeline of ",
                    spec.num_stages(), " stages");
        TITAN_CHECK(spec.rank_of_stage(a.stage) == rank, where, "'", a.str(), "' is stage ", a.stage,
                    "'s, which runs on rank ", spec.rank_of_stage(a.stage), " under ", schedule_name(spec.kind),
                    "'s placement");
        TITAN_CHECK(a.microbatch < spec.microbatches, where, "'", a.str(), "' names micro-batch ", a.microbatch,
                    " of a step of ", spec.microbatches);
        actions.push_back(a);
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    ranks.push_back(std::move(actions));
  }
  TITAN_CHECK(static_cast<int>(ranks.size()) == spec.pp, "pipeline schedule ", path, ": ", ranks.size(),
              " row(s) for a pipeline of ", spec.pp, " ranks (one row per rank)");
  return ranks;
}

std::string schedule_csv(const std::vector<RankActions>& actions) {
  std::string out;
  for (const RankActions& rank : actions) {
    bool first = true;
    for (const Action& a : rank) {
      if (!a.is_compute()) continue;
      out += (first ? "" : ",") + a.str();
      first = false;
    }
    out += "\n";
  }
  return out;
}

}  // namespace titan::pp
