// Lab 05 checker: your 1F1B order (one_f_one_b.cpp), checked by what 1F1B
// must do rather than against titan's own generator:
//
//   1. on paper (titan::pp::simulate, costs F = 1, B = 2, communication
//      free), for several (pp, m) with m = pp and m > pp: the order of all
//      ranks is complete and deadlock-free; rank r never holds more than
//      pp − r micro-batches' activations (1F1B's memory bound; GPipe holds
//      m); and the bubble is the optimum of a flush pipeline,
//      (p − 1)/(m + p − 1), on every rank;
//   2. for real: a tiny 8-layer Llama 3 trained 3 AdamW steps by titan's
//      pipeline runtime running YOUR order on every rank (pp = ranks), with
//      m = pp and m = 2·pp, must match the single-process reference.
//
//   labs/check.sh 05           (builds lab05_check from starter/ and runs it)
//   build/bin/lab05_check --nproc 2
//
// Tolerance (fp32): loss and gradients 1e-6 relative + 1e-7 absolute,
// parameters verify::adam_param_tolerance. The pipeline sums each gradient
// over micro-batches (another order than the reference's one batch), so
// results differ by rounding only (see tests/parallel/test_pipeline.cpp).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "lab_check.hpp"
#include "one_f_one_b.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/program.hpp"
#include "titan/parallel/pipeline/simulate.hpp"
#include "titan/util/error.hpp"
#include "titan/verify/pipeline_technique.hpp"

using namespace titan;

namespace {

using lab::fmt;
using lab::global_max;
using lab::report;

const verify::Tolerance kTol{1e-6, 1e-7};

std::string shape_name(int pp, int m) { return "pp " + std::to_string(pp) + ", m " + std::to_string(m); }

pp::ScheduleSpec spec_of(int p, int m) {
  pp::ScheduleSpec s;
  s.kind = pp::ScheduleKind::OneFOneB;
  s.pp = p;
  s.stages_per_rank = 1;
  s.microbatches = m;
  return s;
}

std::vector<pp::RankActions> learner_orders(int p, int m) {
  std::vector<pp::RankActions> all;
  for (int r = 0; r < p; ++r) all.push_back(lab05::one_f_one_b_order(r, p, m));
  return all;
}

std::string ints(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
  return s;
}

// What simulate() made of the learner's order for one shape.
struct PaperResult {
  int pp = 0, m = 0;
  std::string error;  // non-empty: simulate refused the order
  pp::SimulatedRun run;
};

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int, char**) -> int {
    const auto& world = dist::init_distributed({.device = "cpu"});
    const int n = world.size(), rank = world.rank();

    if (rank == 0) {
      std::printf("your order for pp 4, m 8 (compute actions per rank):\n%s\n",
                  pp::format_schedule(learner_orders(4, 8)).c_str());
    }

    // ---------------------------------------------------------- 1. on paper
    const std::vector<std::pair<int, int>> shapes = {{2, 2}, {2, 5}, {3, 3}, {3, 7}, {4, 4}, {4, 8}, {4, 16}};
    std::vector<PaperResult> paper;
    for (auto [p, m] : shapes) {
      PaperResult res{p, m, "", {}};
      try {
        res.run = pp::simulate(spec_of(p, m), learner_orders(p, m));  // F = 1, B = 2
      } catch (const std::exception& e) {
        res.error = e.what();
      }
      paper.push_back(std::move(res));
    }

    std::string sim_detail;
    for (const auto& res : paper)
      if (!res.error.empty() && sim_detail.empty()) sim_detail = shape_name(res.pp, res.m) + ": " + res.error;
    const bool sim_ok = sim_detail.empty();
    report(sim_ok, "simulate: every micro-batch through its stage once (F then B), no deadlock",
           sim_ok ? std::to_string(shapes.size()) + " shapes (pp 2-4, m = pp to 4·pp) complete and deadlock-free"
                  : sim_detail);

    // Memory: peak_in_flight[r] <= pp - r on every simulated shape.
    // (Shown: the shape that exceeds the bound by the most.)
    std::string mem_detail;
    bool mem_ok = sim_ok;
    int worst_excess = 0;
    for (const auto& res : paper) {
      if (!res.error.empty()) continue;
      std::vector<int> bound;
      int excess = 0;
      for (int r = 0; r < res.pp; ++r) {
        bound.push_back(res.pp - r);
        excess = std::max(excess, res.run.peak_in_flight[static_cast<size_t>(r)] - (res.pp - r));
      }
      if (excess > worst_excess) {
        worst_excess = excess;
        mem_ok = false;
        mem_detail = shape_name(res.pp, res.m) + ": ranks hold at most " + ints(res.run.peak_in_flight) +
                     " micro-batches, 1F1B allows " + ints(bound);
      }
    }
    if (mem_ok) {
      const PaperResult& last = paper.back();
      mem_detail = "e.g. " + shape_name(last.pp, last.m) + ": peaks " + ints(last.run.peak_in_flight) +
                   " micro-batches (bound pp − r)";
    } else if (!sim_ok) {
      mem_detail = "not checked: the order does not simulate";
    }
    report(mem_ok, "memory: rank r holds at most pp − r micro-batches' activations", mem_detail);

    // Bubble: 1 − busy/makespan = (p − 1)/(m + p − 1) on every rank.
    double worst = sim_ok ? 0 : INFINITY;
    std::string bub_detail = sim_ok ? "" : "not checked: the order does not simulate";
    for (const auto& res : paper) {
      if (!res.error.empty()) continue;
      const double want = (res.pp - 1.0) / (res.m + res.pp - 1.0);
      for (int r = 0; r < res.pp; ++r) {
        const double got = res.run.bubble[static_cast<size_t>(r)], d = std::abs(got - want);
        if (d > worst || bub_detail.empty()) {
          worst = std::max(worst, d);
          bub_detail = "worst: " + shape_name(res.pp, res.m) + ", rank " + std::to_string(r) +
                       fmt(": bubble %.4f, (p-1)/(m+p-1) = %.4f", got, want) +
                       fmt(" (makespan %.0f units)", res.run.makespan);
        }
      }
    }
    report(worst < 1e-9, "bubble: (p − 1)/(m + p − 1) on every rank (F = 1, B = 2)", bub_detail);

    // ---------------------------------------------------------- 2. for real
    // pp = every rank; the 8 layers split evenly over the stages.
    verify::RunSpec spec;
    spec.model.n_layers = 8;
    spec.device = world.device();
    for (int m : {n, 2 * n}) {
      const std::string name = "training " + shape_name(n, m);
      const std::vector<pp::RankActions> orders = learner_orders(n, m);
      // The same lists on every rank, so every rank refuses or accepts alike.
      std::string refused;
      try {
        pp::simulate(spec_of(n, m), orders);
      } catch (const std::exception& e) {
        refused = e.what();
      }
      if (!refused.empty()) {
        report(false, name + ": loss, gradients and parameters equal the single-process reference",
               "not run: the order does not simulate (" + refused + ")");
        continue;
      }
      verify::PipelineRunOptions o;
      o.kind = pp::ScheduleKind::OneFOneB;
      o.microbatches = m;
      o.runtime.compute_actions = orders;  // the runtime runs YOUR order
      verify::PipelineRun run = verify::build_pipeline_run(spec, world.group(), o);

      pp::RankActions ran;
      for (const auto& a : run.runtime->actions())
        if (a.is_compute()) ran.push_back(a);
      report(global_max(ran == orders[static_cast<size_t>(rank)] ? 0 : 1) == 0,
             name + ": the runtime runs your order on every rank",
             "rank " + std::to_string(rank) + " runs " + std::to_string(run.runtime->actions().size()) +
                 " actions (" + std::to_string(ran.size()) + " compute, the rest sends and receives)");

      auto opt = verify::build_optimizer(spec, run.parameters());
      const verify::Trajectory got =
          verify::run_steps(spec, run.parts.front(), *opt, 0, 1, verify::pipeline_technique(run, spec));
      const verify::Trajectory ref = verify::train_reference(spec);
      const auto diffs = verify::compare(ref, got, kTol, verify::adam_param_tolerance(spec.optimizer.lr));
      bool ok = true;
      double dl = 0, dg = 0, dp = 0;
      for (size_t k = 0; k < diffs.size(); ++k) {
        const auto& d = diffs[k];
        ok = ok && d.ok();
        dl = std::max(dl, d.loss), dg = std::max(dg, d.grads.max_abs), dp = std::max(dp, d.params.max_abs);
        if (rank == 0)
          std::printf("  %s step %zu: loss %.6f (reference %.6f) |dloss| %.2g |dgrad| %.2g (%s) |dparam| %.2g (%s)\n",
                      name.c_str(), k + 1, d.got_loss, d.ref_loss, d.loss, d.grads.max_abs, d.grads.worst.c_str(),
                      d.params.max_abs, d.params.worst.c_str());
      }
      report(global_max(ok ? 0 : 1) == 0, name + ": loss, gradients and parameters equal the single-process reference",
             fmt("%.0f steps: max |dloss| %.2g", double(diffs.size()), dl) + fmt(", |dgrad| %.2g", dg) +
                 fmt(", |dparam| %.2g", dp) +
                 fmt(" (tolerance %.0e relative + %.0e; parameters: Adam's)", kTol.rtol, kTol.atol));
    }

    return lab::finish();
  });
}
