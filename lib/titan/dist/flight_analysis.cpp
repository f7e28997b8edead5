#include "titan/dist/flight_analysis.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "titan/util/error.hpp"

namespace titan::dist {
namespace {

CommOp op_from_name(const std::string& name, const std::string& path) {
  for (CommOp op : {CommOp::AllReduce, CommOp::AllGather, CommOp::ReduceScatter, CommOp::AllToAll, CommOp::Broadcast,
                    CommOp::Reduce, CommOp::Send, CommOp::Recv, CommOp::Barrier})
    if (name == comm_op_name(op)) return op;
  throw Error(path + ": unknown op '" + name + "' in a flight-recorder entry");
}

std::string sizes_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string ranks_str(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string ranks_phrase(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + ranks_str(ranks);
}

// What must agree across the members of one collective.
std::string signature(const FlightEntry& e) {
  return std::string(comm_op_name(e.op)) + " " + sizes_str(e.input_sizes) + " " + e.dtype;
}

std::string describe_entry(const FlightEntry& e) {
  std::string s = signature(e);
  if (!e.context.empty()) s += " (" + e.context + ")";
  return s;
}

}  // namespace

FlightDump load_flight_dump(const std::string& path) {
  std::ifstream in(path);
  TITAN_CHECK(in, "cannot read flight-recorder dump ", path);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw Error(path + " is not a flight-recorder dump (not JSON: " + std::string(e.what()) + ")");
  }
  TITAN_CHECK(j.is_object() && j.contains("version") && j.contains("entries") && j.contains("rank"), path,
              " is not a flight-recorder dump (no version, rank and entries)");
  TITAN_CHECK(j["version"] == 1, path, ": flight-recorder format version ", j["version"].dump(),
              " is not the one this titan reads (1)");
  FlightDump d;
  d.path = path;
  try {
    d.rank = j.at("rank").get<int>();
    d.world_size = j.value("world_size", 1);
    d.buffer_entries = j.value("buffer_entries", int64_t{0});
    d.entries_issued = j.value("entries_issued", int64_t{0});
    const nlohmann::json groups = j.value("groups", nlohmann::json::object());  // alive for the loop
    for (const auto& [name, ranks] : groups.items())
      d.groups[name] = ranks.get<std::vector<int>>();
    for (const auto& x : j.at("entries")) {
      FlightEntry e;
      e.id = x.at("id").get<int64_t>();
      e.group = x.at("group").get<std::string>();
      e.seq = x.at("seq").get<int64_t>();
      e.p2p = x.value("p2p", false);
      e.op = op_from_name(x.at("op").get<std::string>(), path);
      e.peer = x.value("peer", -1);
      e.input_sizes = x.value("input_sizes", std::vector<int64_t>{});
      e.output_sizes = x.value("output_sizes", std::vector<int64_t>{});
      e.dtype = x.value("dtype", std::string());
      e.context = x.value("context", std::string());
      e.step = x.value("step", int64_t{0});
      const std::string state = x.value("state", std::string());
      TITAN_CHECK(state == "scheduled" || state == "started" || state == "completed", path, ": entry ", e.id,
                  " has state '", state, "' (expected scheduled, started or completed)");
      e.completed = state == "completed";
      e.started = e.completed || state == "started";
      e.scheduled_us = x.value("scheduled_s", 0.0) * 1e6;
      e.started_us = x.value("started_s", 0.0) * 1e6;
      e.completed_us = x.value("completed_s", 0.0) * 1e6;
      d.entries.push_back(std::move(e));
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(path + ": malformed flight-recorder entry (" + std::string(e.what()) + ")");
  }
  return d;
}

std::vector<FlightDump> load_flight_dumps(const std::string& folder) {
  namespace fs = std::filesystem;
  TITAN_CHECK(fs::is_directory(folder), "flight-recorder folder ", folder, " does not exist");
  std::vector<std::string> paths;
  for (const auto& f : fs::directory_iterator(folder))
    if (f.is_regular_file() && f.path().extension() == ".json") paths.push_back(f.path().string());
  std::sort(paths.begin(), paths.end());
  TITAN_CHECK(!paths.empty(), "no flight-recorder dumps (*.json) in ", folder);
  std::vector<FlightDump> dumps;
  std::set<int> ranks;
  for (const auto& p : paths) {
    dumps.push_back(load_flight_dump(p));
    TITAN_CHECK(ranks.insert(dumps.back().rank).second, folder, " holds two dumps of rank ", dumps.back().rank,
                " (from two jobs?)");
  }
  return dumps;
}

FlightAnalysis analyse_flight_traces(const std::vector<FlightDump>& dumps) {
  FlightAnalysis a;
  std::map<int, const FlightDump*> by_rank;
  std::map<std::string, std::vector<int>> groups;
  for (const auto& d : dumps) {
    by_rank[d.rank] = &d;
    a.world_size = std::max(a.world_size, d.world_size);
    for (const auto& [name, ranks] : d.groups) groups[name] = ranks;
  }
  for (int r = 0; r < a.world_size; ++r) (by_rank.count(r) ? a.ranks_with_traces : a.ranks_without_traces).push_back(r);

  // For ordering findings: when the lowest rank that issued it did.
  std::vector<std::pair<std::pair<int64_t, double>, FlightFinding>> found;
  for (const auto& [name, members] : groups) {
    std::map<int, std::map<int64_t, const FlightEntry*>> seqs;  // rank -> seq -> entry
    std::vector<int> present, absent;
    for (int r : members) {
      if (!by_rank.count(r)) {
        absent.push_back(r);
        continue;
      }
      present.push_back(r);
      auto& m = seqs[r];
      for (const auto& e : by_rank[r]->entries)
        if (e.group == name && !e.p2p) m[e.seq] = &e;
    }
    if (present.empty()) continue;
    // The buffers may have dropped their oldest entries: start where every
    // rank that recorded this group still has them.
    int64_t first = 1, last = 0;
    for (int r : present)
      if (!seqs[r].empty()) {
        first = std::max(first, seqs[r].begin()->first);
        last = std::max(last, seqs[r].rbegin()->first);
      }
    auto max_seq = [&](int r) { return seqs[r].empty() ? int64_t{0} : seqs[r].rbegin()->first; };
    for (int64_t s = first; s <= last; ++s) {
      std::vector<int> entered, never;
      std::map<std::string, std::vector<int>> by_signature;
      const FlightEntry* sample = nullptr;
      bool all_completed = true;
      std::vector<int> not_completed, waiting;
      for (int r : present) {
        auto it = seqs[r].find(s);
        if (it == seqs[r].end()) {
          if (max_seq(r) < s) never.push_back(r);
          continue;
        }
        entered.push_back(r);
        if (!sample) sample = it->second;
        by_signature[signature(*it->second)].push_back(r);
        if (!it->second->completed) {
          all_completed = false;
          not_completed.push_back(r);
          if (it->second->started) waiting.push_back(r);
        }
      }
      if (!sample) continue;
      FlightFinding f;
      f.group = name;
      f.seq = s;
      f.step = sample->step;
      std::ostringstream os;
      os << "group '" << name << "' (ranks " << ranks_str(members) << "), collective #" << s << ", step " << sample->step
         << ": ";
      if (by_signature.size() > 1) {
        // The majority's call is the expected one; the others are the odd ones out.
        auto majority = std::max_element(by_signature.begin(), by_signature.end(), [](const auto& x, const auto& y) {
          return x.second.size() < y.second.size();
        });
        f.kind = FlightFinding::Kind::Mismatch;
        os << "the ranks disagree: " << ranks_phrase(majority->second) << " "
           << describe_entry(*seqs[majority->second.front()][s]);
        for (const auto& [sig, ranks] : by_signature) {
          if (sig == majority->first) continue;
          os << "; " << ranks_phrase(ranks) << " " << describe_entry(*seqs[ranks.front()][s]);
          // A rank that skipped one: its #s is what the others call #s+1.
          const int usual = majority->second.front();
          auto next = seqs[usual].find(s + 1);
          if (next != seqs[usual].end() && signature(*next->second) == sig)
            os << " (the others' #" << s + 1 << ": " << ranks_phrase(ranks) << " skipped #" << s << ")";
          f.behind.insert(f.behind.end(), ranks.begin(), ranks.end());
        }
      } else if (!never.empty()) {
        f.kind = FlightFinding::Kind::NeverEntered;
        os << describe_entry(*sample) << " entered by " << ranks_phrase(entered) << ", never by " << ranks_phrase(never);
        f.behind = never;
      } else if (!all_completed) {
        f.kind = FlightFinding::Kind::NeverCompleted;
        os << describe_entry(*sample) << " entered by " << ranks_phrase(entered) << ", never completed on "
           << ranks_phrase(not_completed);
        // Which of them were blocked in it, and which had only issued it
        // (an asynchronous op not yet needed).
        if (!waiting.empty() && waiting.size() < not_completed.size())
          os << " (waiting in it: " << ranks_phrase(waiting) << ")";
        else if (!waiting.empty())
          os << (waiting.size() == 1 ? " (waiting in it)" : " (each waiting in it)");
      } else {
        continue;  // agreed and done
      }
      if (!absent.empty()) {
        os << "; no trace from " << ranks_phrase(absent);
        f.behind.insert(f.behind.end(), absent.begin(), absent.end());
      }
      f.text = os.str();
      const FlightDump& lowest = *by_rank[entered.empty() ? present.front() : entered.front()];
      double when = sample->scheduled_us;
      for (const auto& e : lowest.entries)
        if (e.group == name && !e.p2p && e.seq == s) when = e.scheduled_us;
      found.push_back({{f.step, when}, std::move(f)});
      break;  // later collectives of this group are shifted or never happened
    }
  }
  std::stable_sort(found.begin(), found.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::set<int> behind;
  for (auto& [key, f] : found) {
    behind.insert(f.behind.begin(), f.behind.end());
    a.findings.push_back(std::move(f));
  }
  a.behind.assign(behind.begin(), behind.end());

  for (const auto& [rank, d] : by_rank) {
    int shown = 0, pending = 0;
    for (const auto& e : d->entries) {
      if (!e.p2p || e.completed) continue;
      ++pending;
      if (shown++ >= 3) continue;
      std::ostringstream os;
      os << "rank " << rank << ": " << comm_op_name(e.op) << (e.op == CommOp::Send ? " to" : " from") << " rank "
         << e.peer << " " << sizes_str(e.input_sizes) << " " << e.dtype;
      if (!e.context.empty()) os << " (" << e.context << ")";
      os << " on group '" << e.group << "', step " << e.step << ", never completed";
      a.pending_p2p.push_back(os.str());
    }
    if (pending > 3) a.pending_p2p.push_back("rank " + std::to_string(rank) + ": " + std::to_string(pending - 3) +
                                             " more point-to-point ops never completed");
  }
  return a;
}

std::string format_flight_analysis(const FlightAnalysis& a) {
  std::ostringstream os;
  os << "flight recorder: traces from " << ranks_phrase(a.ranks_with_traces) << " of " << a.world_size;
  if (!a.ranks_without_traces.empty())
    os << "; none from " << ranks_phrase(a.ranks_without_traces)
       << " (killed, stopped, or stuck where it could not write one)";
  os << "\n";
  if (a.findings.empty() && a.pending_p2p.empty()) {
    os << "no disagreement: every collective the traces hold was entered by every member with a trace, with the "
          "same op, sizes and dtype, and completed\n";
    if (!a.ranks_without_traces.empty()) os << "ranks behind: " << ranks_str(a.ranks_without_traces) << "\n";
    return os.str();
  }
  for (size_t i = 0; i < a.findings.size(); ++i) os << (i == 0 ? "first: " : "then:  ") << a.findings[i].text << "\n";
  for (const auto& p : a.pending_p2p) os << "pending: " << p << "\n";
  if (!a.behind.empty()) os << "ranks behind: " << ranks_str(a.behind) << "\n";
  return os.str();
}

}  // namespace titan::dist
