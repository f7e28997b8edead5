#include "titan/parallel/activation_checkpoint/checkpoint.hpp"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Generator.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <cstdlib>
#include <mutex>
#include <set>

#include "titan/ops/backward_callbacks.hpp"
#include "titan/ops/gemm/cpu_matmul.hpp"
#include "titan/ops/input_gradient_split.hpp"
#include "titan/ops/linear.hpp"
#include "titan/util/error.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::ac {
namespace {

using torch::autograd::variable_list;

// The generator a forward on `device` draws from, and its state.
struct RngState {
  at::Generator gen;
  c10::intrusive_ptr<c10::TensorImpl> state;
};

RngState capture_rng(const c10::Device& device) {
  RngState r;
  r.gen = device.is_cpu() ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(r.gen.mutex());
  r.state = r.gen.get_state().getIntrusivePtr();
  return r;
}

void restore_rng(RngState r) {  // a copy: Generator handles share their impl
  std::lock_guard<std::mutex> lock(r.gen.mutex());
  r.gen.set_state(at::Tensor(r.state));
}

// Whether the forward ran under autocast (mixed precision without FSDP),
// and to which dtype: the recompute, which runs in backward outside the
// autocast scope, must compute as the forward did (torch's checkpoint
// keeps the autocast state the same way).
struct AutocastState {
  c10::DeviceType device = c10::DeviceType::CPU;
  bool enabled = false;
  at::ScalarType dtype = at::kFloat;
};

AutocastState capture_autocast(const c10::Device& device) {
  return {device.type(), at::autocast::is_autocast_enabled(device.type()),
          at::autocast::get_autocast_dtype(device.type())};
}

// Puts `s` in force for a scope, then what was there before. Like
// torch.autocast it counts as a nesting level, so that the weights it casts
// are dropped from autocast's cache at its end: the optimizer updates them
// in place before the next forward, which must not find stale copies.
class AutocastRestore {
 public:
  explicit AutocastRestore(const AutocastState& s) : before_(capture_autocast(c10::Device(s.device))) {
    set(s);
    at::autocast::increment_nesting();
  }
  ~AutocastRestore() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set(before_);
  }

 private:
  static void set(const AutocastState& s) {
    at::autocast::set_autocast_enabled(s.device, s.enabled);
    at::autocast::set_autocast_dtype(s.device, s.dtype);
  }
  AutocastState before_;
};

// The grad_fn of a checkpointed output: recompute, then backward.
struct CheckpointBackward : torch::autograd::Node {
  std::function<at::Tensor(const at::Tensor&)> fn;
  at::Tensor input;  // detached
  bool input_requires_grad = false;
  RngState rng;
  AutocastState amp;
  std::string name() const override { return "titan::ac::CheckpointBackward"; }

  variable_list apply(variable_list&& grads) override {
    TITAN_CHECK(fn, "activation checkpoint: backward ran twice through the same checkpointed forward "
                    "(retain_graph is not supported with checkpointing)");
    // Replay the forward's random draws, then put the generator back where
    // the backward found it.
    RngState now = capture_rng(input.device());
    restore_rng(rng);
    at::Tensor x = input.detach().requires_grad_(input_requires_grad);
    at::Tensor y;
    {
      ops::RecomputeScope recompute;
      at::AutoGradMode grad_on(true);
      const AutocastRestore as_in_forward(amp);
      y = fn(x);
    }
    restore_rng(now);
    fn = nullptr;   // the recompute's graph is consumed below
    input = at::Tensor();
    // Reentrant backward: gradients go to the parameters (and to x) as they
    // would have without checkpointing. The final callbacks its nodes queue
    // (FSDP's wait for the gradient reductions, DDP's bucket copy-out) are
    // the whole backward's, not this block's: they run when it ends.
    ops::ReentrantBackwardScope reentrant;
    at::Tensor grad_x;
    ops::InputGradientSplitter* split = ops::active_input_gradient_splitter();
    if (split && input_requires_grad) {
      // A zero-bubble input step: x's gradient now, the block's weights'
      // gradients in the schedule's weight step (input_gradient_split.hpp).
      grad_x = split->input_gradient(y, x, grads.at(0));
    } else {
      torch::autograd::backward({y}, {grads.at(0)});
      if (input_requires_grad) grad_x = x.grad();
    }
    reentrant.hand_over();
    return {grad_x};
  }
};

}  // namespace

at::Tensor checkpoint(std::function<at::Tensor(const at::Tensor&)> fn, const at::Tensor& input) {
  if (!at::GradMode::is_enabled()) return fn(input);
  auto node = std::shared_ptr<CheckpointBackward>(new CheckpointBackward(), torch::autograd::deleteNode);
  node->rng = capture_rng(input.device());
  node->amp = capture_autocast(input.device());
  at::Tensor out;
  {
    at::NoGradGuard no_grad;
    const ops::CheckpointedForwardScope first_pass;
    out = fn(input);
  }
  node->fn = std::move(fn);
  node->input = input.detach();
  node->input_requires_grad = input.requires_grad();
  node->set_next_edges(torch::autograd::collect_next_edges(input));
  // A fresh handle on the output's data whose history is the node.
  out = out.detach();
  torch::autograd::set_history(out, node);
  return out;
}

void checkpoint_module(ops::HookableModule& module) {
  module.set_forward_wrapper(
      [](const at::Tensor& input, std::function<at::Tensor(const at::Tensor&)> run) {
        return checkpoint(std::move(run), input);
      });
}

AcPolicy AcPolicy::from_config(const std::string& mode, const std::string& option) {
  AcPolicy p;
  if (mode == "none") return p;
  if (mode == "full") {
    p.mode = AcMode::Full;
    return p;
  }
  TITAN_CHECK(mode == "selective", "[activation_checkpoint] mode '", mode,
              "' is not one of none, selective, full");
  if (option == "op") {
    p.mode = AcMode::SelectivePerOp;
    return p;
  }
  char* end = nullptr;
  const long long every = std::strtoll(option.c_str(), &end, 10);
  TITAN_CHECK(!option.empty() && end && *end == '\0' && every > 0, "[activation_checkpoint] selective_ac_option '",
              option, "' must be a positive integer N (every N-th block) or \"op\"");
  p.mode = AcMode::SelectiveEveryN;
  p.every = every;
  return p;
}

std::vector<bool> AcPolicy::blocks(int64_t n_blocks) const {
  std::vector<bool> out(static_cast<size_t>(n_blocks), mode == AcMode::Full || mode == AcMode::SelectivePerOp);
  if (mode == AcMode::SelectiveEveryN)
    for (int64_t i = 0; i < n_blocks; ++i) out[static_cast<size_t>(i)] = (i + 1) % every == 0;
  return out;
}

std::string AcPolicy::describe(int64_t wrapped, int64_t n_blocks) const {
  const std::string counts = " (" + std::to_string(wrapped) + " of " + std::to_string(n_blocks) + " blocks)";
  switch (mode) {
    case AcMode::Full: return "full AC" + counts;
    case AcMode::SelectivePerOp: return "selective per-op AC (matmul outputs kept)" + counts;
    case AcMode::SelectiveEveryN: return "selective AC every " + std::to_string(every) + " block(s)" + counts;
    case AcMode::None: break;
  }
  return "";
}

std::string AcPolicy::config_words() const {
  switch (mode) {
    case AcMode::Full: return "full";
    case AcMode::SelectivePerOp: return "selective (op)";
    case AcMode::SelectiveEveryN: return "selective (" + std::to_string(every) + ")";
    case AcMode::None: break;
  }
  return "none";
}

namespace {

// The matmul outputs of one checkpointed forward: recorded by its first
// (no-grad) run, consumed in order by its recompute.
struct MatmulCache {
  std::vector<at::Tensor> outputs;
  std::vector<ops::ForwardHook*> computed_by;  // the hook that computed each (null: the Linear's own matmul)
  size_t next = 0;
  bool recorded = false;
};

thread_local MatmulCache* t_cache = nullptr;

// Marks the forward of one op-checkpointed module on this thread.
class CacheScope {
 public:
  explicit CacheScope(MatmulCache* cache) : previous_(t_cache) {
    t_cache = cache;
    cache->next = 0;
  }
  ~CacheScope() {
    t_cache->recorded = true;
    t_cache = previous_;
  }

 private:
  MatmulCache* previous_;
};

}  // namespace

std::optional<KeptMatmulOutput> kept_matmul_output(size_t ahead) {
  const MatmulCache* cache = t_cache;
  if (!cache || !cache->recorded) return std::nullopt;  // not inside a recompute
  const size_t i = cache->next + ahead;
  if (i >= cache->outputs.size() || !cache->outputs[i].defined()) return std::nullopt;
  return KeptMatmulOutput{cache->outputs[i], cache->computed_by[i]};
}

namespace {

// y = x Wᵀ whose value is given (kept from the forward) and whose backward
// is linear's: grad_x = g W, grad_W = gᵀ x, with the GEMM the Linear runs
// (ops::mm: oneDNN's under cpu_matmul, so that per-op AC rounds as no AC
// does). Under autocast the forward multiplied in y's dtype (bf16) with W
// cast to it: so does the backward, and each gradient goes back in its
// input's dtype (the fp32 weight's gradient through the cast, as
// autograd's own cast node would).
struct CachedLinear : public torch::autograd::Function<CachedLinear> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& y) {
    ctx->save_for_backward({x, w});
    return y;
  }
  static variable_list backward(torch::autograd::AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const at::Tensor g = grads[0];
    const at::ScalarType compute = g.scalar_type();
    const at::Tensor g2 = g.reshape({-1, g.size(-1)});
    at::Tensor grad_x = ops::mm(g2, w.to(compute)).view(x.sizes()).to(x.scalar_type());
    at::Tensor grad_w = ops::mm(g2.t(), x.to(compute).reshape({-1, x.size(-1)})).to(w.scalar_type());
    return {grad_x, grad_w, at::Tensor()};
  }
};

// On each Linear of an op-checkpointed module (its first hook): records
// its output in the forward, hands it back (with the matmul's backward) in
// the recompute — unless its weight shape is forced to be recomputed. The
// matmul is the Linear's own, or that of a later hook that replaces it
// (float8's, whose reuse_output casts x and W again for its backward).
class MatmulCacheHook : public ops::ForwardHook {
 public:
  MatmulCacheHook(ops::LinearImpl* linear, bool recompute) : linear_(linear), recompute_(recompute) {}
  at::Tensor forward_override(const at::Tensor& x) override {
    MatmulCache* cache = t_cache;
    if (!cache || recompute_) return {};  // not inside an op-checkpointed forward, or never kept
    if (!cache->recorded) {
      // As the module would: the first other hook that replaces the matmul, else linear.
      at::Tensor y;
      ops::ForwardHook* by = nullptr;
      for (const auto& h : linear_->forward_hooks())
        if (h.get() != this && (y = h->forward_override(x)).defined()) {
          by = h.get();
          break;
        }
      if (!by) y = ops::linear(x, linear_->weight);
      cache->outputs.push_back(y.detach());
      cache->computed_by.push_back(by);
      return y;
    }
    TITAN_CHECK(cache->next < cache->outputs.size(), "activation checkpoint (op): the recompute ran more matmuls (",
                cache->next + 1, ") than the forward (", cache->outputs.size(), ")");
    at::Tensor y = cache->outputs[cache->next];
    ops::ForwardHook* by = cache->computed_by[cache->next];
    cache->outputs[cache->next++] = at::Tensor();  // the graph holds it now
    if (!by) return CachedLinear::apply(x, linear_->weight, y);
    at::Tensor reused = by->reuse_output(x, y);
    TITAN_INTERNAL_ASSERT(reused.defined(), "activation checkpoint (op): a hook replaced this Linear's matmul but "
                                            "cannot reuse its output (per-op AC should have refused the layout)");
    return reused;
  }


 private:
  ops::LinearImpl* linear_;  // the module owns this hook
  bool recompute_;
};

}  // namespace

void checkpoint_module_selective_op(ops::HookableModule& module, const std::vector<std::string>& force_recompute_fqns,
                                    const std::string& base_fqn) {
  // torchtitan's rule: the weight shapes of the Linears whose name contains
  // one of the strings; any matmul with such a weight is recomputed.
  std::set<std::vector<int64_t>> recompute_shapes;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    const std::string fqn = base_fqn.empty() ? item.key() : base_fqn + "." + item.key();
    bool named = false;
    for (const std::string& f : force_recompute_fqns) named = named || fqn.find(f) != std::string::npos;
    if (!named) continue;
    auto* linear = dynamic_cast<ops::LinearImpl*>(item.value().get());
    TITAN_CHECK(linear != nullptr, "[activation_checkpoint] per_op_sac_force_recompute_mm_shapes_by_fqns matches ", fqn,
                ", which is not a Linear (name Linear layers, e.g. \"feed_forward.w1\")");
    recompute_shapes.insert(linear->weight.sizes().vec());
  }
  for (const auto& item : module.named_modules("", /*include_self=*/false))
    if (auto* linear = dynamic_cast<ops::LinearImpl*>(item.value().get())) {
      // Once per Linear (wrapping again is harmless); outside an
      // op-checkpointed forward the hook does nothing.
      bool present = false;
      for (const auto& h : linear->forward_hooks()) present = present || dynamic_cast<MatmulCacheHook*>(h.get());
      if (!present)
        linear->add_forward_hook_first(
            std::make_shared<MatmulCacheHook>(linear, recompute_shapes.count(linear->weight.sizes().vec()) > 0));
    }
  module.set_forward_wrapper([](const at::Tensor& input, std::function<at::Tensor(const at::Tensor&)> run) {
    auto cache = std::make_shared<MatmulCache>();
    return checkpoint(
        [cache, run](const at::Tensor& x) {
          CacheScope scope(cache.get());
          return run(x);
        },
        input);
  });
}

}  // namespace titan::ac
