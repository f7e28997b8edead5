// `titan verify`: does this config's parallel layout train exactly as one
// process does? Runs the job's layout for a few steps and the
// single-process reference on the same global batches, prints a table per
// step and exits non-zero naming the first step and parameter that
// diverged (lib/titan/verify/layout_check.hpp).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "titan/config/config.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/program.hpp"
#include "titan/train/job_layout.hpp"
#include "titan/util/error.hpp"
#include "titan/util/strprintf.hpp"
#include "titan/verify/layout_check.hpp"

namespace titan::cli {
namespace {

void print_help() {
  std::printf(
      "usage: titan verify [--job.config_file F] [--section.key value ...] --nproc N\n"
      "                    [--steps K] [--flavor NAME|config] [--rtol X] [--wtol X]\n"
      "Trains the config's parallel layout on N ranks for K steps (default 3) and one process on the same\n"
      "global batches, in fp32, and compares them step by step: loss, gradient norm, every weight.\n"
      "The model is the debug flavor unless --flavor names another (--flavor config: the config's own).\n"
      "Bounds (fp32 rounding): --rtol on losses and gradient norms (default 1e-6), --wtol on weights\n"
      "(default 2.5e-4). With float8 linears, losses and gradient norms are judged at 5e-4 (float8\n"
      "rounding) and weights are shown only. Exits 1 naming the first step and parameter that diverged.\n"
      "Example: titan verify --job.config_file train_configs/debug_model.toml --nproc 4 \\\n"
      "           --parallelism.tensor_parallel_degree 2\n");
}

// The value after flag own[i], or a one-line error.
const std::string& value_of(const std::vector<std::string>& own, size_t& i) {
  TITAN_CHECK(i + 1 < own.size(), "titan verify: ", own[i], " needs a value");
  return own[++i];
}

double number(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  TITAN_CHECK(end && *end == '\0' && !text.empty(), "titan verify: ", flag, " takes a number, got '", text, "'");
  return v;
}

// Why step `s` failed, in one line.
std::string divergence(const verify::LayoutCheckStep& s, const verify::LayoutCheckReport& r) {
  if (!r.float8 && !(s.max_weight_diff <= r.options.weight_tol))
    return strprintf("step %lld diverges from one process: %s differs by %.2e (bound %.1e)",
                     static_cast<long long>(s.step), s.worst_parameter.c_str(), s.max_weight_diff,
                     r.options.weight_tol);
  if (!(s.loss_rel <= r.rel_bound()))
    return strprintf("step %lld diverges from one process: the loss is %.8f against %.8f (%.2e relative, bound %.1e)",
                     static_cast<long long>(s.step), s.loss, s.ref_loss, s.loss_rel, r.rel_bound());
  return strprintf(
      "step %lld diverges from one process: the gradient norm is %.8f against %.8f (%.2e relative, bound %.1e)",
      static_cast<long long>(s.step), s.grad_norm, s.ref_grad_norm, s.grad_norm_rel, r.rel_bound());
}

// verify's own flags (--steps, --flavor, --rtol, --wtol); nullopt for --help.
std::optional<verify::LayoutCheckOptions> parse_options(const std::vector<std::string>& own) {
  verify::LayoutCheckOptions o;
  for (size_t i = 0; i < own.size(); ++i) {
    const std::string& a = own[i];
    if (a == "--help" || a == "-h") return std::nullopt;
    if (a == "--steps") {
      const double steps = number(a, value_of(own, i));
      TITAN_CHECK(steps >= 1 && steps == static_cast<double>(static_cast<int64_t>(steps)),
                  "titan verify: --steps takes a whole number of at least 1, got ", own[i]);
      o.steps = static_cast<int64_t>(steps);
    } else if (a == "--flavor") {
      const std::string& f = value_of(own, i);
      o.flavor = f == "config" ? "" : f;
    } else if (a == "--rtol") {
      o.rel_tol = number(a, value_of(own, i));
    } else if (a == "--wtol") {
      o.weight_tol = number(a, value_of(own, i));
    } else {
      throw Error("titan verify: unexpected argument '" + a + "' (see titan verify --help)");
    }
  }
  return o;
}

// `--nproc N`: the layout the ranks will train, worked out once here before
// any starts (as `titan train` does), so that a bad config is one line.
void check_before_launch(int argc, char** argv, int nproc) {
  std::vector<std::string> own;
  const config::JobConfig cfg = config::parse_job_config(argc, argv, 2, &own);
  const std::optional<verify::LayoutCheckOptions> o = parse_options(own);
  if (!o) return;
  train::check_job_before_launch(verify::layout_check_config(cfg, *o), nproc);
}

int cmd_verify(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    std::vector<std::string> own;
    config::JobConfig cfg = config::parse_job_config(argc, argv, 2, &own);
    const std::optional<verify::LayoutCheckOptions> o = parse_options(own);
    if (!o) {
      print_help();
      return 0;
    }
    const verify::LayoutCheckReport report = verify::check_layout(cfg, *o);
    if (report.steps.empty()) return 0;  // a rank other than 0: rank 0 judges
    std::cout << verify::format_layout_check(report) << std::flush;
    const int64_t failed = report.first_failed_step();
    if (failed == 0) return 0;
    std::fprintf(stderr, "error: titan verify: %s\n",
                 divergence(report.steps[static_cast<size_t>(failed - 1)], report).c_str());
    return 1;
  }, check_before_launch);
}

}  // namespace

TITAN_COMMAND("verify", cmd_verify,
              "check that a config's parallel layout trains exactly as one process (--nproc N)");

}  // namespace titan::cli
