#include "titan/models/llama3/tp_plan.hpp"

#include "titan/parallel/tensor_parallel/async_tp.hpp"
#include "titan/util/error.hpp"

namespace titan::models::llama3 {
namespace {

using tp::ColwiseParallel;
using tp::PrepareModuleInput;
using tp::RowwiseParallel;
using tp::SequenceParallel;

std::shared_ptr<tp::ParallelStyle> colwise(Placement in, Placement out, bool local = true) {
  auto s = std::make_shared<ColwiseParallel>();
  s->input_layouts = in;
  s->output_layouts = out;
  s->use_local_output = local;
  return s;
}

std::shared_ptr<tp::ParallelStyle> rowwise(Placement in, Placement out) {
  auto s = std::make_shared<RowwiseParallel>();
  s->input_layouts = in;
  s->output_layouts = out;
  return s;
}

std::shared_ptr<tp::ParallelStyle> prepare_input(Placement in, Placement desired) {
  auto s = std::make_shared<PrepareModuleInput>();
  s->input_layouts = in;
  s->desired_input_layouts = desired;
  return s;
}

}  // namespace

tp::ParallelizePlan llama3_tp_plan(const TpOptions& o) {
  const Placement rep = Placement::replicate();
  const Placement seq = Placement::shard(1);
  const Placement last = Placement::shard(-1);
  // Between blocks the residual stream is Shard(1) with SP, Replicate without.
  const Placement stream = o.sequence_parallel ? seq : rep;
  tp::ParallelizePlan plan;
  plan.emplace_back("tok_embeddings", rowwise(rep, stream));
  if (o.sequence_parallel) plan.emplace_back("norm", std::make_shared<SequenceParallel>());
  plan.emplace_back("output", colwise(stream, o.loss_parallel ? last : rep));
  if (o.sequence_parallel) {
    plan.emplace_back("layers.*.attention_norm", std::make_shared<SequenceParallel>());
    plan.emplace_back("layers.*.ffn_norm", std::make_shared<SequenceParallel>());
  }
  plan.emplace_back("layers.*.attention", prepare_input(stream, rep));
  for (const char* w : {"wq", "wk", "wv"})
    plan.emplace_back(std::string("layers.*.attention.") + w, colwise(rep, last));
  plan.emplace_back("layers.*.attention.wo", rowwise(last, stream));
  plan.emplace_back("layers.*.feed_forward", prepare_input(stream, rep));
  plan.emplace_back("layers.*.feed_forward.w1", colwise(rep, last));
  plan.emplace_back("layers.*.feed_forward.w2", rowwise(last, stream));
  plan.emplace_back("layers.*.feed_forward.w3", colwise(rep, last));
  return plan;
}

void check_tp_divisibility(const ModelArgs& args, int64_t tp) {
  TITAN_CHECK(tp >= 1, "tensor parallel degree must be >= 1, got ", tp);
  const std::pair<const char*, int64_t> sizes[] = {{"n_heads", args.n_heads},
                                                   {"n_kv_heads", args.kv_heads()},
                                                   {"dim", args.dim},
                                                   {"the FFN hidden size", args.ffn_hidden_dim()}};
  for (const auto& [name, v] : sizes)
    TITAN_CHECK(v % tp == 0, "tensor parallel degree ", tp, " does not divide the model's ", name, " (", v,
                "): each rank must hold whole heads and equal slices");
}

void check_tp_job(const ModelArgs& args, int64_t tp, int64_t seq_len, const TpOptions& options) {
  check_tp_divisibility(args, tp);
  TITAN_CHECK(!options.async_tp || options.sequence_parallel,
              "async tensor parallel overlaps the sequence-parallel all-gathers and reduce-scatters with their "
              "matmuls: it needs enable_sequence_parallel = true");
  TITAN_CHECK(!options.sequence_parallel || seq_len % tp == 0, "[training] seq_len ", seq_len,
              " does not divide by tensor_parallel_degree ", tp,
              " (sequence parallelism gives every rank seq_len/tp tokens; or set enable_sequence_parallel = false)");
}

std::string apply_tp(Transformer& model, const dist::DeviceMesh& tp_mesh, const TpOptions& options) {
  check_tp_divisibility(model->args(), tp_mesh.size(0));
  tp::ParallelizePlan plan = llama3_tp_plan(options);
  // Pipeline stages hold only some of the modules; drop the entries that
  // match nothing here so the same plan serves every stage.
  tp::ParallelizePlan present;
  for (auto& entry : plan) {
    const std::string& path = entry.first;
    if ((path == "tok_embeddings" && !model->tok_embeddings) || ((path == "norm" || path == "output") && !model->output))
      continue;
    if (path.rfind("layers.", 0) == 0 && model->layers->size() == 0) continue;
    present.push_back(std::move(entry));
  }
  tp::parallelize_module(*model, tp_mesh, present);
  // A pipeline stage without blocks (the embeddings alone, or the norm and
  // output) has no all-gather -> matmul or matmul -> reduce-scatter to fuse.
  if (options.async_tp && model->layers->size() > 0) tp::enable_async_tp(*model);
  return "TP over " + std::to_string(tp_mesh.size(0)) + " ranks (" +
         (options.sequence_parallel ? "sequence parallel" : "no sequence parallel") +
         (options.loss_parallel ? ", loss parallel" : "") + (options.async_tp ? ", async" : "") + ")";
}

}  // namespace titan::models::llama3
