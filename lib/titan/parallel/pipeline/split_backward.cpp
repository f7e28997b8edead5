#include "titan/parallel/pipeline/split_backward.hpp"

#include <torch/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>
#include <algorithm>
#include <unordered_map>
#include <utility>

#include "titan/ops/input_gradient_split.hpp"
#include "titan/util/internal_assert.hpp"

namespace titan::pp {

using torch::autograd::Edge;
using torch::autograd::edge_list;
using torch::autograd::Node;
using torch::autograd::variable_list;

namespace {

// Keeps the gradients that reach a node (its inputs, as the engine summed
// them) and passes them on unchanged.
struct KeepGradients : torch::autograd::FunctionPreHook {
  explicit KeepGradients(std::shared_ptr<variable_list> into) : into(std::move(into)) {}
  variable_list operator()(const variable_list& grads) override {
    *into = grads;
    return grads;
  }
  std::shared_ptr<variable_list> into;
};

}  // namespace

struct SplitBackward::State {
  at::Tensor target, input;
  struct Boundary {
    std::shared_ptr<Node> node;
    std::vector<size_t> weight_edges;                                  // its next edges off the input path
    std::shared_ptr<variable_list> grads = std::make_shared<variable_list>();  // what reached it in I
  };
  std::vector<Boundary> boundaries;
  // The recomputed graphs of the checkpointed blocks I ran through, each
  // split the same way; W finishes them after this graph's weights.
  std::vector<std::unique_ptr<SplitBackward>> inner;
};

namespace {

// During I: a checkpointed block hands its recomputed graph here.
struct KeepInnerSplits : ops::InputGradientSplitter {
  explicit KeepInnerSplits(std::vector<std::unique_ptr<SplitBackward>>* into) : into(into) {}
  at::Tensor input_gradient(const at::Tensor& target, const at::Tensor& input, const at::Tensor& grad) override {
    auto split = std::make_unique<SplitBackward>(target, input);
    at::Tensor g = split->input_backward(grad);
    into->push_back(std::move(split));
    return g;
  }
  std::vector<std::unique_ptr<SplitBackward>>* into;
};

}  // namespace

SplitBackward::SplitBackward(const at::Tensor& target, const at::Tensor& input) : s_(std::make_unique<State>()) {
  s_->target = target;
  s_->input = input;
  const std::shared_ptr<Node> root = target.grad_fn();
  TITAN_INTERNAL_ASSERT(root != nullptr, "split backward of a stage output without a graph");
  TITAN_INTERNAL_ASSERT(input.defined() && input.requires_grad(), "split backward needs the stage's input leaf");
  const Node* input_node = torch::autograd::impl::gradient_edge(input).function.get();

  // Which nodes lead to the input (post-order, iterative: a deep model's
  // graph is thousands of nodes long).
  std::unordered_map<const Node*, bool> reaches{{input_node, true}};
  std::unordered_map<const Node*, std::shared_ptr<Node>> nodes;
  std::vector<std::pair<std::shared_ptr<Node>, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->num_outputs()) {
      const Edge& e = node->next_edge(next++);
      if (e.is_valid() && !reaches.count(e.function.get())) stack.emplace_back(e.function, 0);
      continue;
    }
    bool r = false;
    for (const Edge& e : node->next_edges()) r = r || (e.is_valid() && reaches.at(e.function.get()));
    reaches[node.get()] = r;
    nodes[node.get()] = node;
    stack.pop_back();
  }
  // The boundary: nodes on the input path with an edge off it.
  for (const auto& [raw, node] : nodes) {
    if (!reaches.at(raw)) continue;
    State::Boundary b;
    for (size_t i = 0; i < node->num_outputs(); ++i) {
      const Edge& e = node->next_edge(i);
      if (e.is_valid() && !reaches.at(e.function.get())) b.weight_edges.push_back(i);
    }
    if (b.weight_edges.empty()) continue;
    b.node = node;
    node->add_pre_hook(std::make_unique<KeepGradients>(b.grads));
    s_->boundaries.push_back(std::move(b));
  }
  // W runs them in this order, and some run collectives inside (async TP's
  // rings, float8's amax all-reduces under TP): every rank of such a group
  // must run them in the same order, which the map's (pointer-hashed) order
  // is not. Creation order is: the same forward on every rank makes its
  // nodes in the same order. Latest first, as a backward meets them.
  std::sort(s_->boundaries.begin(), s_->boundaries.end(), [](const State::Boundary& a, const State::Boundary& b) {
    return a.node->sequence_nr() > b.node->sequence_nr();
  });
}

SplitBackward::~SplitBackward() = default;

size_t SplitBackward::boundary_nodes() const { return s_->boundaries.size(); }

at::Tensor SplitBackward::input_backward(const at::Tensor& grad_output) {
  const std::vector<at::Tensor> grad_outputs =
      grad_output.defined() ? std::vector<at::Tensor>{grad_output} : std::vector<at::Tensor>{};
  KeepInnerSplits keep(&s_->inner);
  const ops::InputGradientSplitterScope splitting(&keep);
  return torch::autograd::grad({s_->target}, {s_->input}, grad_outputs, /*retain_graph=*/true).at(0);
}

void SplitBackward::collect_weight_gradients(edge_list& below, variable_list& below_grads) {
  auto& engine = torch::autograd::Engine::get_default_engine();
  // Each boundary node once more, from what reached it in I, asking only
  // for its weight edges' gradients. The engine runs every node on a path
  // to a node whose gradient is asked for, and FSDP's UnshardBackward ends
  // the weight edges of all of a unit's boundary nodes: so while one runs,
  // the others' weight edges are cut (restored after), which leaves this
  // node as the only way there and nothing on the input path runs again.
  std::vector<edge_list> weight_edges;
  for (State::Boundary& b : s_->boundaries) {
    weight_edges.emplace_back();
    for (size_t i : b.weight_edges) weight_edges.back().push_back(std::exchange(b.node->next_edges()[i], Edge()));
  }
  auto set_edges = [&](size_t k, bool on) {
    State::Boundary& b = s_->boundaries[k];
    for (size_t j = 0; j < b.weight_edges.size(); ++j)
      b.node->next_edges()[b.weight_edges[j]] = on ? weight_edges[k][j] : Edge();
  };
  auto restore_all = [&] {
    for (size_t k = 0; k < s_->boundaries.size(); ++k) set_edges(k, true);
  };
  try {
    for (size_t k = 0; k < s_->boundaries.size(); ++k) {
      State::Boundary& b = s_->boundaries[k];
      edge_list roots;
      variable_list inputs;
      for (size_t i = 0; i < b.grads->size(); ++i)
        if ((*b.grads)[i].defined()) {
          roots.emplace_back(b.node, static_cast<uint32_t>(i));
          inputs.push_back((*b.grads)[i]);
        }
      if (roots.empty()) continue;  // I brought it no gradient: nothing for its weights either
      set_edges(k, true);
      const variable_list got = engine.execute(roots, inputs, /*keep_graph=*/false, /*create_graph=*/false,
                                               /*accumulate_grad=*/false, weight_edges[k]);
      set_edges(k, false);
      for (size_t j = 0; j < got.size(); ++j)
        if (got[j].defined()) {
          below.push_back(weight_edges[k][j]);
          below_grads.push_back(got[j]);
        }
    }
  } catch (...) {
    restore_all();
    throw;
  }
  restore_all();
  // The checkpointed blocks' recomputed graphs, in the order I reached them.
  for (std::unique_ptr<SplitBackward>& inner : s_->inner) inner->collect_weight_gradients(below, below_grads);
}

void SplitBackward::weight_backward() {
  edge_list below;
  variable_list below_grads;
  collect_weight_gradients(below, below_grads);
  // Then everything below the weight edges in one pass, so that a node fed
  // by several boundary nodes (FSDP's UnshardBackward: a unit's weights)
  // runs once, with all of its gradients, and a callback queued for the
  // backward's end (DDP's) runs once every weight has its gradient — the
  // checkpointed blocks' too.
  if (!below.empty())
    torch::autograd::Engine::get_default_engine().execute(below, below_grads, /*keep_graph=*/false,
                                                          /*create_graph=*/false, /*accumulate_grad=*/true);
  s_->inner.clear();
  s_->boundaries.clear();
  s_->target = at::Tensor();
  s_->input = at::Tensor();
}

}  // namespace titan::pp
