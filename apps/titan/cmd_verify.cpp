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
      "                    [--resume-at S [--resume-as --section.key value ...]]\n"
      "Trains the config's parallel layout on N ranks for K steps (default 3) and one process on the same\n"
      "global batches, in fp32, and compares them step by step: loss, gradient norm, every weight (and the\n"
      "validation loss with [validation] enable).\n"
      "The model is the debug flavor unless --flavor names another (--flavor config: the config's own).\n"
      "Bounds (fp32 rounding): --rtol on losses and gradient norms (default 1e-6), --wtol on weights\n"
      "(default 2.5e-4). With float8 linears, losses and gradient norms are judged at 5e-4 (float8\n"
      "rounding) and weights are shown only. Exits 1 naming the first step and parameter that diverged.\n"
      "--resume-at S: after step S the layout saves a checkpoint ([checkpoint] async_mode as configured) and\n"
      "stops; a new run loads it and trains the rest, while one process runs on. --resume-as, last: the\n"
      "overrides after it apply to the resumed run only (another layout of the same ranks, e.g. TP 2 saved,\n"
      "CP 2 resumed; the data-parallel degree, batches and sequence length must stay).\n"
      "Example: titan verify --job.config_file train_configs/debug_model.toml --nproc 4 \\\n"
      "           --parallelism.tensor_parallel_degree 2\n");
}

// The command line cut at --resume-as: the overrides of both runs, and
// those of the resumed run alone (empty without the flag).
struct VerifyArgs {
  std::vector<std::string> both, resumed_only;
  bool resume_as = false;
};

VerifyArgs split_args(int argc, char** argv) {
  VerifyArgs a;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!a.resume_as && arg == "--resume-as") a.resume_as = true;
    else (a.resume_as ? a.resumed_only : a.both).push_back(arg);
  }
  return a;
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
  if (!(s.val_loss_rel <= r.rel_bound()))
    return strprintf("step %lld diverges from one process: the validation loss is %.8f against %.8f (%.2e relative, "
                     "bound %.1e)",
                     static_cast<long long>(s.step), *s.val_loss, *s.ref_val_loss, s.val_loss_rel, r.rel_bound());
  return strprintf(
      "step %lld diverges from one process: the gradient norm is %.8f against %.8f (%.2e relative, bound %.1e)",
      static_cast<long long>(s.step), s.grad_norm, s.ref_grad_norm, s.grad_norm_rel, r.rel_bound());
}

// The job's config and verify's own flags (--steps, --flavor, --rtol,
// --wtol, --resume-at, and --resume-as's config); nullopt for --help.
std::optional<verify::LayoutCheckOptions> parse_options(const VerifyArgs& args, config::JobConfig& cfg) {
  std::vector<std::string> own;
  cfg = config::parse_job_config(args.both, &own);
  verify::LayoutCheckOptions o;
  if (args.resume_as) {
    TITAN_CHECK(!args.resumed_only.empty(), "titan verify: --resume-as needs config overrides after it "
                "(--section.key value ...)");
    std::vector<std::string> all = args.both, own_too;
    all.insert(all.end(), args.resumed_only.begin(), args.resumed_only.end());
    o.resume_as = config::parse_job_config(all, &own_too);
    TITAN_CHECK(own_too.size() == own.size(), "titan verify: --resume-as takes config overrides only "
                "(--section.key value), and comes last; got '", own_too[own.size()], "'");
  }
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
    } else if (a == "--resume-at") {
      const double step = number(a, value_of(own, i));
      TITAN_CHECK(step >= 1 && step == static_cast<double>(static_cast<int64_t>(step)),
                  "titan verify: --resume-at takes a step number of at least 1, got ", own[i]);
      o.resume_at = static_cast<int64_t>(step);
    } else {
      throw Error("titan verify: unexpected argument '" + a + "' (see titan verify --help)");
    }
  }
  return o;
}

// `--nproc N`: the layout the ranks will train, worked out once here before
// any starts (as `titan train` does), so that a bad config is one line.
void check_before_launch(int argc, char** argv, int nproc) {
  config::JobConfig cfg;
  const std::optional<verify::LayoutCheckOptions> o = parse_options(split_args(argc, argv), cfg);
  if (!o) return;
  const train::JobLayout saved = train::check_job_before_launch(verify::layout_check_config(cfg, *o), nproc);
  if (o->resume_as)
    verify::check_resume_layout(saved,
                                train::check_job_before_launch(verify::layout_check_config(*o->resume_as, *o), nproc));
}

int cmd_verify(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    config::JobConfig cfg;
    const std::optional<verify::LayoutCheckOptions> o = parse_options(split_args(argc, argv), cfg);
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
