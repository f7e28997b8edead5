#include "titan/models/llama3/transformer.hpp"

#include <cmath>
#include <string>

#include "titan/models/llama3/init_plan.hpp"
#include "titan/ops/attention/document_mask.hpp"
#include "titan/ops/init.hpp"
#include "titan/parallel/context_parallel/context.hpp"
#include "titan/util/error.hpp"

namespace titan::models::llama3 {

TransformerImpl::TransformerImpl(ModelArgs args, at::TensorOptions options) : args_(std::move(args)) {
  args_.validate();
  // Registration order = named_parameters() order = torchtitan's state-dict order.
  tok_embeddings = register_module("tok_embeddings", ops::Embedding(args_.vocab_size, args_.dim, options));
  layers = register_module("layers", torch::nn::ModuleDict());
  for (int64_t i = 0; i < args_.n_layers; ++i)
    layers->update({{std::to_string(i), TransformerBlock(i, args_, options).ptr()}});
  norm = register_module("norm", ops::RMSNorm(args_.dim, args_.norm_eps, options, args_.fused_kernels));
  output = register_module("output", ops::Linear(args_.dim, args_.vocab_size, options));
  if (args_.tie_word_embeddings) output->tie_to(tok_embeddings.ptr());
}

std::vector<std::shared_ptr<TransformerBlockImpl>> TransformerImpl::blocks() const {
  std::vector<std::shared_ptr<TransformerBlockImpl>> out;
  out.reserve(layers->size());
  for (const auto& item : layers->items())
    out.push_back(std::static_pointer_cast<TransformerBlockImpl>(item.second));
  return out;
}

const ops::RopeTable& TransformerImpl::rope_table(at::Device device) {
  if (!rope_device_ || *rope_device_ != device) {
    rope_ = ops::make_rope_table(args_.head_dim(), args_.max_seq_len, args_.rope_theta,
                                 args_.rope_scaling, device);
    rope_device_ = device;
  }
  return rope_;
}

void TransformerImpl::set_context_parallel(std::shared_ptr<const cp::ContextParallel> cp) {
  cp_ = cp;
  for (const auto& block : blocks()) block->attention->context_parallel = cp;
}

at::Tensor TransformerImpl::forward(const at::Tensor& input, const at::Tensor& doc_start, int64_t seq_len) {
  return call_with_hooks(input, [this, doc_start, seq_len](const at::Tensor& in) {
    return forward_body(in, doc_start, seq_len);
  });
}

at::Tensor TransformerImpl::forward_body(const at::Tensor& input, const at::Tensor& doc_start, int64_t seq_len) {
  at::Tensor h;
  if (tok_embeddings) {
    TITAN_CHECK(input.dim() == 2, "llama3: expected tokens [batch, seq], got ", input.sizes());
    h = tok_embeddings(input);
  } else {
    TITAN_CHECK(input.dim() == 3, "llama3: stage without tok_embeddings expects hidden states "
                "[batch, seq, dim], got ", input.sizes());
    h = input;
  }
  // The sequence length is the tokens' (or, on a later pipeline stage,
  // the one it is told, or the document starts'): under sequence
  // parallelism the embeddings' output holds only this rank's slice of it,
  // while attention (which cuts the table to what it sees) works on the
  // whole.
  const bool documents = args_.attn_mask_type == "block_causal";
  TITAN_CHECK(!documents || doc_start.defined(), "llama3: attn_mask_type \"block_causal\" needs the batch's "
              "doc_start (data::Batch::doc_start); got none");
  const bool known = tok_embeddings || seq_len > 0 || documents;
  const int64_t seq = tok_embeddings ? input.size(1)
                      : seq_len > 0  ? seq_len
                      : documents    ? doc_start.size(1)
                                     : input.size(1);
  TITAN_CHECK(seq <= args_.max_seq_len, "llama3: sequence length ", seq,
              " exceeds the model's max_seq_len ", args_.max_seq_len);
  const ops::RopeTable& rope = rope_table(h.device());
  // A later pipeline stage under sequence parallelism that is not told the
  // length gets seq/tp positions of hidden states and cannot tell the
  // length attention will see: it passes the whole table and attention
  // takes the rows it needs.
  const int64_t rows = known ? seq : args_.max_seq_len;
  at::Tensor cos = rope.cos.narrow(0, 0, rows), sin = rope.sin.narrow(0, 0, rows);
  // The window positions this rank's tokens hold: under context
  // parallelism seq of the cp·seq positions, not 0..seq−1 (undefined: those).
  at::Tensor positions;
  if (cp_) {
    // A later pipeline stage must know seq for that (pipeline stages pass
    // their micro-batch's).
    TITAN_CHECK(known, "llama3: a pipeline stage without the token embeddings under context parallelism needs "
                "the sequence length (forward's seq_len)");
    const int64_t full = seq * cp_->attention.layout.cp;
    TITAN_CHECK(full <= args_.max_seq_len, "llama3: context-parallel sequence length ", full,
                " exceeds the model's max_seq_len ", args_.max_seq_len);
    positions = cp_->positions(full).to(rope.cos.device());
    cos = rope.cos.index_select(0, positions), sin = rope.sin.index_select(0, positions);
  }
  at::Tensor block_doc_start;
  if (documents) {
    // A later pipeline stage gets the same micro-batch's doc_start as the
    // first (pp::BatchInputs), so every stage rotates and masks alike.
    TITAN_CHECK(doc_start.dim() == 2 && doc_start.size(0) == h.size(0), "llama3: doc_start must be [batch, seq] "
                "with the input's batch of ", h.size(0), ", got ", doc_start.sizes());
    TITAN_CHECK(!tok_embeddings || doc_start.size(1) == seq, "llama3: doc_start covers ", doc_start.size(1),
                " positions but the tokens ", seq);
    // Under cp: this rank's shard of the window's doc_start, whose values
    // are window positions (what ring attention compares keys with).
    block_doc_start = doc_start.to(h.device());
    // RoPE positions restart with each document: per-sequence tables.
    const at::Tensor pos = ops::document_positions(block_doc_start, positions);
    cos = rope.cos.index_select(0, pos.flatten()).view({pos.size(0), pos.size(1), -1});
    sin = rope.sin.index_select(0, pos.flatten()).view({pos.size(0), pos.size(1), -1});
  }
  // SDPA would turn the boolean mask into an additive bias in every layer
  // and save each for its backward: made once here, all layers share one
  // (measured, debug model, seq 2048, batch 2: peak 1.48 → 1.28 GiB, where
  // causal takes 1.27).
  at::Tensor sdpa_bias;
  if (documents && !cp_ && args_.attn_type == "sdpa")
    sdpa_bias = ops::block_causal_bias(block_doc_start, h.scalar_type());
  for (const auto& block : blocks()) h = block->forward(h, cos, sin, block_doc_start, sdpa_bias);
  if (norm) h = norm(h);
  if (output) h = output(h);
  return h;
}

void TransformerImpl::init_weights() {
  at::NoGradGuard no_grad;
  // torchtitan's recipes in its order (init_plan.hpp); pieces a pipeline
  // stage dropped draw nothing. Tied, the one weight gets the output's
  // init, as torchtitan 0.3 does (it skips the embedding's init and
  // initialises lm_head).
  auto own = named_parameters();
  for (const ParamInit& p : init_plan(args_))
    if (at::Tensor* t = own.find(p.fqn)) ops::init_(*t, p.recipe);
}

void TransformerImpl::keep_layers(int64_t begin, int64_t end) {
  // An empty range is a pipeline end stage that holds only the embeddings
  // or only the norm and output (torchtitan's split makes such stages).
  TITAN_CHECK(0 <= begin && begin <= end && end <= args_.n_layers, "llama3: keep_layers [", begin,
              ", ", end, ") is not a range within 0..", args_.n_layers);
  // ModuleDict::pop keeps the registration (mirroring Python), so build a new
  // dict with the kept blocks under their original keys and swap it in.
  torch::nn::ModuleDict kept;
  for (const auto& item : layers->items()) {
    int64_t id = std::static_pointer_cast<TransformerBlockImpl>(item.second)->layer_id;
    if (id >= begin && id < end) kept->update({{item.first, item.second}});
  }
  layers = replace_module("layers", kept);
}

void TransformerImpl::drop_tok_embeddings() {
  if (!tok_embeddings) return;
  TITAN_CHECK(!args_.tie_word_embeddings, "llama3: the output is tied to tok_embeddings, which cannot be dropped");
  unregister_module("tok_embeddings");
  tok_embeddings = nullptr;
}

void TransformerImpl::drop_head() {
  if (norm) unregister_module("norm");
  if (output) unregister_module("output");
  norm = nullptr;
  output = nullptr;
}

}  // namespace titan::models::llama3
