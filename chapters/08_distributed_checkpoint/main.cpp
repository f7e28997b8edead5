// Chapter 08 — Distributed checkpointing (DCP).
//
// A job of N ranks holds its model in pieces: FSDP gives each rank some
// rows of every weight, TP some rows or columns, PP some layers, and the
// Adam moments are sharded the same way. Gathering all of it on one rank
// to write one file would need the whole model (and its optimizer state,
// 3x more) in one rank's memory — exactly what sharding avoids. So every
// rank writes its own pieces, and a piece is described by the box of the
// global tensor it covers:
//
//   layers.0.attention.wq.weight  [256, 64], FSDP over 4 ranks
//     rank 0: rows   0- 63   rank-00000.safetensors  saved_offsets [0, 0]
//     rank 1: rows  64-127   rank-00001.safetensors  saved_offsets [64, 0]
//     ...
//
// Loading into another layout (FSDP 2, TP 2 x FSDP 2, one process) is then
// geometry: each rank computes the box it needs now and reads, from every
// saved box that overlaps it, the overlap (the lab of this chapter). That is
// what torch.distributed.checkpoint does; titan writes its files in DCP's
// Hugging Face layout (safetensors + DCP_SHARDING_INFO), so Python's
// dcp.load(..., HuggingFaceStorageReader(dir)) reads them too.
//
// Crash safety comes from the order of operations: write into
// step-N.partial/, fsync every file, write metadata.json (sizes, CRC-32s,
// the tensor index) last, rename the folder to step-N, fsync the parent.
// A crash at any point leaves either no step-N or a complete one.
//
// This program, on N emulated ranks: (1) trains FSDP N and saves, printing
// the folder and the boxes of one tensor; (2) loads that checkpoint into
// other layouts and compares the weights with the saved ones; (3) resumes
// after a "crash" and compares with the uninterrupted run; (4) times a
// synchronous save against the two async modes; (5) shows a partial save
// ignored and a corrupted file refused; (6) exports the model as a Hugging
// Face folder that every rank writes its own rows of, gathered by nobody.
//
//   ./build/bin/ch08_distributed_checkpoint --nproc 4
//   ./build/bin/ch08_distributed_checkpoint --nproc 2 --quick     # CTest
//
// Exit status 0 means every load and resume was exact (bitwise in fp32).
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/file_io.hpp"
#include "titan/checkpoint/hf_folder.hpp"
#include "titan/checkpoint/manager.hpp"
#include "titan/util/files.hpp"
#include "titan/dist/process_group.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/options.hpp"
#include "titan/launch/program.hpp"
#include "titan/metrics/format.hpp"
#include "titan/train/trainer.hpp"
#include "titan/util/error.hpp"
#include "titan/util/measure.hpp"
#include "titan/util/strprintf.hpp"

using namespace titan;
using titan::strprintf;

namespace {

struct Options {
  int64_t steps = 4;  // per half: saved at `steps`, the whole run does 2x
  int64_t dim = 256;
  int64_t layers = 4;
  int64_t saves = 3;  // per async mode, for the timing medians
  bool quick = false;
};

struct Run {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> weights;  // gathered
  int64_t start_step = 0;
};

models::llama3::ModelArgs model_args(const Options& o) {
  models::llama3::ModelArgs a = models::llama3::flavor_args("debugmodel");
  a.dim = o.dim, a.n_layers = o.layers, a.n_heads = 8, a.n_kv_heads = 4;  // 8 heads: TP 2 fits
  return a;
}

train::TrainerOptions trainer_options(const Options& o, bool single_process = false) {
  train::TrainerOptions t;
  t.model_args = model_args(o);
  t.console = false;
  t.handle_signals = false;
  t.peak_flops = 0;
  if (single_process) t.single_process = train::DataParallelReads{};  // one process, one rank's batches
  return t;
}

config::JobConfig job(const std::string& dump, const Options& o) {
  config::JobConfig c;
  c.job.dump_folder = dump;
  c.training.device = "cpu";
  c.training.seq_len = 32;
  c.training.batch_size = 2;
  c.training.steps = 2 * o.steps;
  c.training.seed = 8;
  c.training.deterministic = true;
  c.training.mixed_precision_param = "float32";
  c.lr_scheduler.warmup_steps = 2;
  c.optimizer.lr = 3e-3;
  c.checkpoint.enable_checkpoint = true;
  c.checkpoint.interval = o.steps;
  return c;
}

Run train_run(const config::JobConfig& cfg, train::TrainerOptions t) {
  Run run;
  t.on_step = [&](const train::StepResult& r) { run.losses.push_back(r.loss); };
  train::Trainer trainer(cfg, t);
  run.start_step = trainer.step();
  trainer.train();
  run.weights = trainer.full_state_dict();
  return run;
}

double max_diff(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b) {
  double d = 0;
  for (const auto& [name, t] : b) d = std::max(d, (a.at(name) - t).abs().max().item<double>());
  return d;
}

std::string box_text(const nlohmann::json& c) {
  std::string s;
  const auto off = c.at("offsets").get<std::vector<int64_t>>();
  const auto len = c.at("lengths").get<std::vector<int64_t>>();
  for (size_t d = 0; d < off.size(); ++d)
    s += strprintf("%s%lld-%lld", d ? " x " : "", static_cast<long long>(off[d]),
                   static_cast<long long>(off[d] + len[d] - 1));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    Options opt;
    OptionParser parser("ch08_distributed_checkpoint",
                        "sharded save, resharding load, exact resume, async save and crash safety");
    parser.add("--steps", &opt.steps, "steps before the save (the uninterrupted run does twice as many)");
    parser.add("--dim", &opt.dim, "model width");
    parser.add("--layers", &opt.layers, "transformer layers");
    parser.add("--saves", &opt.saves, "saves per async mode for the timing (medians)");
    parser.flag("--quick", &opt.quick, "small model, 2 steps (CTest)");
    parser.parse(argc, argv);
    if (opt.quick) opt.dim = 64, opt.layers = 2, opt.steps = 2, opt.saves = 1;

    const dist::World& world = dist::init_distributed({.device = "cpu"});
    const int rank = world.rank(), n = world.size();
    const dist::ProcessGroup& group = *world.group();
    const std::string dump = files::temp_dir() + "/titan_ch08_np" + std::to_string(n);
    if (rank == 0) files::remove_all(dump);
    group.barrier();
    const std::string folder = dump + "/checkpoint";
    bool ok = true;

    // ------------------------------------------------ (1) save
    const config::JobConfig fsdp = job(dump, opt);
    const Run whole = train_run(fsdp, trainer_options(opt));
    const std::string saved_dir = folder + "/" + checkpoint::step_folder_name(opt.steps);
    if (rank == 0) {
      const checkpoint::CheckpointInfo info = checkpoint::open_checkpoint(saved_dir);
      std::printf("1. FSDP %d trained %lld steps, saving every %lld: %s holds\n", n,
                  static_cast<long long>(2 * opt.steps), static_cast<long long>(opt.steps), saved_dir.c_str());
      for (const auto& [file, rec] : info.metadata.at("files").items())
        std::printf("     %-26s %9.1f KiB  CRC-32 %08x\n", file.c_str(), rec.at("bytes").get<double>() / 1024,
                    rec.at("crc32").get<uint32_t>());
      std::printf("     %-26s the index, every file's size and CRC-32, step, LR schedule, data positions, RNG\n",
                  checkpoint::kMetadataFile);
      for (const std::string fqn : {"layers.0.attention.wq.weight", "norm.weight"}) {
        const auto& t = info.metadata.at("tensors").at(fqn);
        std::printf("   %s %s: %zu boxes (rows x columns)\n", fqn.c_str(), t.at("shape").dump().c_str(),
                    t.at("chunks").size());
        for (const auto& c : t.at("chunks"))
          std::printf("     %-26s %s\n", c.at("file").get<std::string>().c_str(), box_text(c).c_str());
      }
      std::printf("   and %zu tensors in all (model + Adam moments \"optimizer.state.<fqn>.exp_avg[_sq]\").\n\n",
                  info.metadata.at("tensors").size());
    }

    // ------------------------------------------------ (2) reshard
    // Every layout loads step `steps`: the one saved, whatever wrote it.
    config::JobConfig at_save = fsdp;
    at_save.checkpoint.load_step = opt.steps;
    at_save.training.steps = opt.steps;  // loaded at the end: nothing left to train
    Run saved_state;
    {
      train::Trainer t(at_save, trainer_options(opt));
      saved_state.weights = t.full_state_dict();
    }
    struct Layout {
      std::string name;
      config::JobConfig cfg;
      bool single = false;
    };
    std::vector<Layout> layouts;
    if (n % 2 == 0) {
      Layout tp{strprintf("TP 2 x FSDP %d", n / 2), at_save};
      tp.cfg.training.tensor_parallel_degree = 2;
      layouts.push_back(tp);
    }
    if (n == 4) {
      Layout hsdp{"HSDP 2 x 2", at_save};
      hsdp.cfg.training.data_parallel_replicate_degree = 2;
      layouts.push_back(hsdp);
      Layout pp{"PP 2 x FSDP 2", at_save};
      pp.cfg.experimental.pipeline_parallel_degree = 2;
      layouts.push_back(pp);
    }
    layouts.push_back({"one process", at_save, true});
    if (rank == 0) std::printf("2. the FSDP %d checkpoint loaded into other layouts (weights gathered back)\n", n);
    for (const Layout& l : layouts) {
      double d = 0;
      if (!l.single || rank == 0) {
        train::Trainer t(l.cfg, trainer_options(opt, l.single));
        d = max_diff(t.full_state_dict(), saved_state.weights);
      }
      if (l.single) group.barrier();
      ok = ok && d == 0;
      if (rank == 0) std::printf("   %-16s max |weight - saved| = %.3g %s\n", l.name.c_str(), d, d == 0 ? "(bitwise)" : "FAIL");
    }

    // ------------------------------------------------ (3) resume
    // The job "dies" after the save at `steps`: its last checkpoint goes,
    // and the restarted job resumes from the one before.
    if (rank == 0) files::remove_all(folder + "/" + checkpoint::step_folder_name(2 * opt.steps));
    group.barrier();
    const Run resumed = train_run(fsdp, trainer_options(opt));
    double loss_diff = 0;
    for (size_t i = 0; i < resumed.losses.size(); ++i)
      loss_diff = std::max(loss_diff, std::abs(resumed.losses[i] - whole.losses[opt.steps + i]));
    const double weight_diff = max_diff(resumed.weights, whole.weights);
    const bool resume_ok = resumed.start_step == opt.steps && loss_diff == 0 && weight_diff == 0;
    ok = ok && resume_ok;
    if (rank == 0)
      std::printf("\n3. resumed at step %lld and trained to %lld: max |loss diff| %.3g, max |weight diff| %.3g "
                  "against the uninterrupted run %s\n\n",
                  static_cast<long long>(resumed.start_step), static_cast<long long>(2 * opt.steps), loss_diff,
                  weight_diff, resume_ok ? "(bitwise)" : "FAIL");

    // ------------------------------------------------ (4) sync vs async
    if (rank == 0)
      std::printf("4. time the training loop waits per save (the median save of %lld), full state of rank 0\n",
                  static_cast<long long>(opt.saves));
    for (const std::string mode : {"disabled", "async", "async_with_pinned_mem"}) {
      config::JobConfig c = fsdp;
      c.checkpoint.async_mode = mode;
      c.checkpoint.folder = "timing_" + mode;
      train::Trainer t(c, trainer_options(opt));
      std::vector<double> blocking, total;
      uint64_t bytes = 0;
      for (int64_t k = 0; k < opt.saves; ++k) {
        t.checkpointer()->save(k + 1);
        t.checkpointer()->close();
        const auto& r = *t.checkpointer()->last_report();
        blocking.push_back(r.blocking_seconds);
        total.push_back(r.total_seconds);
        bytes = r.bytes;
      }
      // The median save by completion time, with its own blocking time:
      // two medians taken apart could show a save that blocks longer than
      // it takes. "disabled" is a synchronous save: it blocks until done.
      std::vector<size_t> order(total.size());
      for (size_t k = 0; k < order.size(); ++k) order[k] = k;
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return total[a] < total[b]; });
      const size_t mid = order[order.size() / 2];
      if (rank == 0)
        std::printf("   %-22s blocks %8.2f ms, complete after %8.2f ms (%6.1f MB/s per rank)\n",
                    (mode == "disabled" ? std::string("disabled (sync)") : mode).c_str(), 1e3 * blocking[mid],
                    1e3 * total[mid], static_cast<double>(bytes) / 1e6 / total[mid]);
    }
    if (rank == 0)
      std::printf("   async blocks only for the copy to host memory; the files are written behind the next steps.\n\n");

    // ------------------------------------------------ (5) crash safety
    if (rank == 0) {
      std::printf("5. crash safety\n");
      // A save that died: its folder has files but no metadata.json.
      const std::string partial = folder + "/" + checkpoint::step_folder_name(2 * opt.steps + 1) + ".partial";
      files::make_directories(partial);
      std::ofstream(partial + "/" + checkpoint::rank_file_name(0)) << "half a file";
      const auto steps = checkpoint::list_checkpoints(folder);
      std::printf("   with %s on disk the complete checkpoints are:", partial.c_str());
      for (int64_t s : steps) std::printf(" step-%lld", static_cast<long long>(s));
      std::printf(" (the partial one is ignored)\n");
      ok = ok && !steps.empty() && steps.back() == 2 * opt.steps;
      // One flipped bit in a copy of the checkpoint.
      const std::string copy = dump + "/corrupt/step-1";
      files::make_directories(dump + "/corrupt");
      std::system(("cp -r '" + saved_dir + "' '" + copy + "'").c_str());
      const std::string file = copy + "/" + checkpoint::rank_file_name(0);
      std::string bytes = checkpoint::read_text_file(file);
      bytes[bytes.size() / 2] ^= 0x01;
      std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
      std::string error;
      try {
        checkpoint::read_model_tensors(copy);
      } catch (const std::exception& e) {
        error = e.what();
      }
      std::printf("   one bit flipped in %s:\n     %s\n\n", file.c_str(), error.empty() ? "NOT DETECTED" : error.c_str());
      ok = ok && !error.empty();
    }
    // ------------------------------------------------ (6) Hugging Face export
    // The last save can be a Hugging Face folder instead ([checkpoint]
    // last_save_in_hf): config.json and safetensors files whose layout
    // (which file holds which tensor, at which offset) follows from the
    // model's shapes alone. So every rank knows where its rows go, rank 0
    // creates the files at their final size, and each rank writes its boxes
    // in place; q and k rows land in Hugging Face's rotate-half order.
    // Here the weights saved at step `steps` are exported as a new job's
    // last save would write them.
    config::JobConfig hf = fsdp;
    hf.checkpoint.folder = "hf_export";
    hf.checkpoint.initial_load_path = saved_dir;
    hf.checkpoint.model_weights_only = true;
    hf.checkpoint.last_save_in_hf = true;
    hf.checkpoint.export_dtype = "bfloat16";
    {
      train::Trainer t(hf, trainer_options(opt));
      t.checkpointer()->maybe_save(opt.steps, /*last=*/true);
    }
    if (rank == 0) {
      const std::string hf_dir = dump + "/hf_export/" + checkpoint::step_folder_name(opt.steps);
      std::printf("6. the model as a Hugging Face folder, each of the %d ranks writing its own rows: %s holds\n", n,
                  hf_dir.c_str());
      for (const std::string& path : files::list_files(hf_dir))
        std::printf("     %-26s %9.1f KiB\n", files::base_name(path).c_str(),
                    static_cast<double>(checkpoint::file_size(path)) / 1024);
      // Read back by the whole-tensor reader (its own q/k permutation).
      const checkpoint::HfCheckpoint back = checkpoint::read_hf_folder(hf_dir);
      double d = 0;
      for (const auto& [name, w] : saved_state.weights)
        d = std::max(d, (back.titan_state.at(name).to(at::kFloat) - w.to(at::kBFloat16).to(at::kFloat))
                            .abs().max().item<double>());
      ok = ok && d == 0;
      std::printf("   read back: %zu tensors, max |HF weight - saved weight in bfloat16| = %.3g %s\n\n",
                  back.titan_state.size(), d, d == 0 ? "(bitwise)" : "FAIL");
    }

    at::Tensor flag = at::full({1}, ok ? 0.0 : 1.0, at::kDouble);
    group.all_reduce(flag, dist::ReduceOp::Max);
    ok = flag.item<double>() == 0;
    if (rank == 0)
      std::printf("%s\n", ok ? "OK: every load and the resume were exact" : "FAIL: a load or the resume differed");
    group.barrier();
    if (rank == 0) files::remove_all(dump);
    return ok ? 0 : 1;
  });
}
