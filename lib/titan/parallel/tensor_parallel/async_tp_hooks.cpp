// enable_async_tp: the styles' hooks at the sequence-parallel boundaries
// are replaced, in place, by async TP's own hook types, which run the
// overlapped rings of async_tp.cpp instead of a collective next to a
// matmul. torch gets the same effect from a compiler pass that rewrites the
// graph (micro-pipeline TP); here the rewrite is a swap of hook objects.
//
//   PrepareModuleInput(Shard(1) → Replicate) whose Colwise children are
//   Linears → AsyncPrepareInputHook: one all_gather_matmul for all the
//   children; each child's AsyncColwiseHook takes its output from the
//   site's mailbox instead of computing its matmul.
//
//   Rowwise Linear with output Shard(1) → AsyncRowwiseHook: the matmul and
//   the reduce-scatter become one matmul_reduce_scatter.

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <utility>

#include "titan/ops/linear.hpp"
#include "titan/parallel/activation_checkpoint/checkpoint.hpp"
#include "titan/parallel/float8/float8_linear.hpp"
#include "titan/parallel/tensor_parallel/async_tp.hpp"
#include "titan/parallel/tensor_parallel/layouts.hpp"
#include "titan/parallel/tensor_parallel/style_hooks.hpp"
#include "titan/util/error.hpp"

namespace titan::tp {
namespace {

using namespace detail;

// One all-gather → matmuls site: the prepared module's pre_forward leaves
// each consumer's output here, and the consumers' forwards, which come
// next in the same module's body, take them. The only state async TP keeps
// between hooks, and it lives for one forward of the module.
struct AllGatherMatmulSite {
  std::vector<ops::LinearImpl*> consumers;  // the Colwise Linears, in module order
  std::vector<const ops::ForwardHook*> consumer_hooks;  // their AsyncColwiseHooks, in the same order
  std::vector<at::Tensor> outputs;          // consumers[i]'s output, until it takes it
  const dist::ProcessGroup* group = nullptr;
  std::string label;

  // In the recompute of a per-op checkpointed block: the consumers' outputs
  // kept from its first pass, in consumer order, when the next kept entries
  // are exactly this site's (every consumer kept, none forced to
  // recompute); else empty. The entries come in the order the body calls
  // the Linears, which need not be the module order (`swiglu(w1(x),
  // w3(x))` evaluates its arguments in an order C++ leaves open).
  std::vector<at::Tensor> kept_outputs() const {
    if (!ops::in_recompute()) return {};
    std::vector<at::Tensor> kept(consumers.size());
    for (size_t ahead = 0; ahead < consumers.size(); ++ahead) {
      const auto k = ac::kept_matmul_output(ahead);
      if (!k) return {};
      const auto it = std::find(consumer_hooks.begin(), consumer_hooks.end(), k->computed_by);
      if (it == consumer_hooks.end()) return {};
      at::Tensor& slot = kept[static_cast<size_t>(it - consumer_hooks.begin())];
      if (slot.defined()) return {};
      slot = k->output;
    }
    return kept;
  }

  // The ring for every consumer at once; returns the gathered input.
  at::Tensor run(const at::Tensor& x) {
    std::vector<at::Tensor> ws;
    for (ops::LinearImpl* c : consumers) ws.push_back(c->weight);
    // Float8 Linears (torchtitan converts after TP): looked up at each call,
    // since the conversion may come after async TP was enabled.
    std::vector<float8::Scaled> w8;
    const dist::ProcessGroup* amax_group = nullptr;
    for (ops::LinearImpl* c : consumers)
      if (auto o = float8::float8_operands(*c)) {
        TITAN_CHECK(w8.empty() || o->amax_group == amax_group, "async TP: ", label,
                    " feeds float8 Linears whose amaxes are taken over different groups");
        w8.push_back(o->weight);
        amax_group = o->amax_group;
      }
    TITAN_CHECK(w8.empty() || w8.size() == consumers.size(), "async TP with float8: ", label,
                " feeds float8 and high-precision Linears from one all-gather; convert all of them or none "
                "([float8] filter_fqns)");
    // Per-op AC's recompute: gather only, the GEMMs' outputs are kept.
    const std::vector<at::Tensor> kept = kept_outputs();
    const std::vector<at::Tensor>* k = kept.empty() ? nullptr : &kept;
    auto out = w8.empty() ? all_gather_matmul(x.contiguous(), ws, *group, label, k)
                          : float8_all_gather_matmul(x.contiguous(), ws, w8, amax_group, *group, label, k);
    outputs.assign(out.begin() + 1, out.end());
    return out[0];
  }
};

// PrepareModuleInput's all-gather, fused with its consumers' matmuls.
class AsyncPrepareInputHook : public PrepareInputHook {
 public:
  AsyncPrepareInputHook(const PrepareInputHook& style, std::shared_ptr<AllGatherMatmulSite> site)
      : PrepareInputHook(style), site_(std::move(site)) {}
  at::Tensor pre_forward(const at::Tensor& x) override {
    at::Tensor gathered = site_->run(x);
    // What the body sees is what the synchronous style would hand it:
    // Replicate, owning the reduction of its consumers' Partial gradient.
    tag_layout(gathered, Placement::replicate(), /*reduces_partial_gradient=*/true);
    return gathered;
  }

 private:
  std::shared_ptr<AllGatherMatmulSite> site_;
};

// A Colwise Linear whose output the site already computed.
class AsyncColwiseHook : public ColwiseHook {
 public:
  AsyncColwiseHook(const ColwiseHook& style, std::shared_ptr<AllGatherMatmulSite> site, size_t index)
      : ColwiseHook(style), site_(std::move(site)), index_(index) {}
  // The gathered input is already Replicate and owns its gradient's
  // reduction (tagged by AsyncPrepareInputHook): nothing to move.
  at::Tensor forward_override(const at::Tensor& x) override {
    (void)x;
    at::Tensor y;
    if (index_ < site_->outputs.size()) std::swap(y, site_->outputs[index_]);
    return y;  // undefined (called outside its site's forward): the Linear computes it
  }
  // Per-op AC's recompute: the site's output again — the kept one, which
  // the site's gather-only ring handed back with its backward.
  at::Tensor reuse_output(const at::Tensor& x, const at::Tensor& kept) override {
    (void)kept;
    return forward_override(x);
  }

 private:
  std::shared_ptr<AllGatherMatmulSite> site_;
  size_t index_;
};

// A Rowwise Linear whose matmul and reduce-scatter are one ring.
//
// Per-op activation checkpointing asks this hook for the output from its
// own first hook (ForwardHook::forward_override without the HookCall), so
// the ring's having reduce-scattered is remembered here until this call's
// post_forward (the Linear's hooks run one call at a time).
class AsyncRowwiseHook : public RowwiseHook {
 public:
  AsyncRowwiseHook(const RowwiseHook& style, std::string label) : RowwiseHook(style), label_(std::move(label)) {}
  at::Tensor forward_override(const at::Tensor& x, ops::HookCall& call) override {
    (void)call;
    return ring(x, nullptr);
  }
  at::Tensor forward_override(const at::Tensor& x) override {
    at::Tensor y = ring(x, nullptr);
    scattered_by_cache_ = true;
    return y;
  }
  // Per-op AC's recompute: the kept, reduce-scattered output with the
  // ring's backward, no GEMM and no transfer.
  at::Tensor reuse_output(const at::Tensor& x, const at::Tensor& kept) override {
    at::Tensor y = ring(x, &kept);
    scattered_by_cache_ = true;
    return y;
  }
  at::Tensor post_forward(const at::Tensor& y, ops::HookCall& call) override {
    // The ring already reduce-scattered: only the hand-on is left.
    if (call.replaced_body || std::exchange(scattered_by_cache_, false))
      return hand_on(y, cfg.output_layouts, cfg.use_local_output);
    return RowwiseHook::post_forward(y, call);
  }

 private:
  at::Tensor ring(const at::Tensor& x, const at::Tensor* kept) {
    const dist::ProcessGroup& g = *mesh->group(0);
    if (auto o = float8::float8_operands(*linear))
      return float8_matmul_reduce_scatter(x.contiguous(), linear->weight, o->weight, o->amax_group, g, label_, kept);
    return matmul_reduce_scatter(x.contiguous(), linear->weight, g, label_, kept);
  }

  std::string label_;
  bool scattered_by_cache_ = false;  // this call's output came through per-op AC's cache, scattered
};

bool is_async(const ops::ForwardHook* h) {
  return dynamic_cast<const AsyncPrepareInputHook*>(h) || dynamic_cast<const AsyncColwiseHook*>(h) ||
         dynamic_cast<const AsyncRowwiseHook*>(h);
}

// The Colwise Linear children of `module` that take a prepared Replicate
// input, with their modules and names.
struct Consumer {
  ops::HookableModule* module;
  ColwiseHook* hook;
  std::string name;
};
std::vector<Consumer> colwise_consumers(torch::nn::Module& module) {
  std::vector<Consumer> out;
  for (const auto& child : module.named_children()) {
    auto* ch = dynamic_cast<ops::HookableModule*>(child.value().get());
    if (!ch) continue;
    for (const auto& hook : ch->forward_hooks()) {
      auto* col = dynamic_cast<ColwiseHook*>(hook.get());
      if (col && col->linear && col->cfg.input_layouts.is_replicate()) out.push_back({ch, col, child.key()});
    }
  }
  return out;
}

}  // namespace

int enable_async_tp(torch::nn::Module& module) {
  int sites = 0;
  for (const auto& item : module.named_modules("", /*include_self=*/true)) {
    auto* h = dynamic_cast<ops::HookableModule*>(item.value().get());
    if (!h) continue;
    const auto hooks = h->forward_hooks();  // a copy: replacing changes the list
    for (const auto& hook : hooks) {
      if (is_async(hook.get())) {  // enabled before
        sites += dynamic_cast<AsyncColwiseHook*>(hook.get()) == nullptr;
        continue;
      }
      if (auto* prep = dynamic_cast<PrepareInputHook*>(hook.get())) {
        if (!(prep->cfg.input_layouts.is_shard(1) && prep->cfg.desired_input_layouts.is_replicate() &&
              !prep->cfg.use_local_output))
          continue;
        const auto consumers = colwise_consumers(*item.value());
        if (consumers.empty()) continue;
        auto site = std::make_shared<AllGatherMatmulSite>();
        std::string names;
        for (const Consumer& c : consumers) {
          site->consumers.push_back(c.hook->linear);
          names += (names.empty() ? "" : ",") + c.name;
        }
        site->group = prep->mesh->group(0).get();
        site->label = item.key() + " ag+mm(" + names + ")";
        for (size_t i = 0; i < consumers.size(); ++i) {
          auto hook = std::make_shared<AsyncColwiseHook>(*consumers[i].hook, site, i);
          site->consumer_hooks.push_back(hook.get());
          consumers[i].module->replace_forward_hook(consumers[i].hook, hook);
        }
        h->replace_forward_hook(prep, std::make_shared<AsyncPrepareInputHook>(*prep, site));
        ++sites;
      } else if (auto* row = dynamic_cast<RowwiseHook*>(hook.get())) {
        if (!row->linear || !row->cfg.output_layouts.is_shard(1)) continue;
        h->replace_forward_hook(row, std::make_shared<AsyncRowwiseHook>(*row, item.key() + " mm+rs"));
        ++sites;
      }
    }
  }
  TITAN_CHECK(sites > 0, "async tensor parallel: nothing to overlap (it fuses the sequence-parallel all-gathers and "
              "reduce-scatters with their matmuls; enable sequence parallelism)");
  return sites;
}

}  // namespace titan::tp
