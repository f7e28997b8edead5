#include "titan/parallel/context_parallel/ring_attention.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "titan/dist/process_group.hpp"
#include "titan/ops/attention/document_mask.hpp"
#include "titan/ops/attention/lse_attention.hpp"
#include "titan/util/range.hpp"
#include "titan/util/error.hpp"

namespace titan::cp {

RotateMethod parse_rotate_method(const std::string& name) {
  if (name == "allgather") return RotateMethod::allgather;
  if (name == "alltoall") return RotateMethod::alltoall;
  throw Error("unknown context_parallel_rotate_method '" + name + "' (valid: allgather, alltoall)");
}

std::string to_string(RotateMethod m) { return m == RotateMethod::allgather ? "allgather" : "alltoall"; }

namespace {

// Gloo matches point-to-point messages by tag: K, V and the travelling
// dK/dV each get their own so that transfers in flight together never meet.
constexpr int kTagK = 1 << 20, kTagV = 2 << 20, kTagDk = 3 << 20, kTagDv = 4 << 20;

// One kernel call: local query chunk `q` against the run of the key
// owner's local chunks [kv_begin, kv_begin + kv_count), all full or one
// diagonal; under block-causal masking with each row's first visible key
// of the block when some row does not see all of it (else undefined).
struct Block {
  int64_t q = 0;
  int64_t kv_begin = 0, kv_count = 1;
  bool causal = false;
  at::Tensor key_begin;  // [B, c] int64 in the block's key positions; in a RingPlan, on q's device
};

// The blocks of this rank's queries against `owner`'s keys (c tokens a
// chunk). Wholly visible key chunks that sit next to each other in the
// owner's piece go into one call (under head-tail the visible ones are
// always a prefix). With `doc_start` (this rank's rows, window positions,
// CPU) a block no row of its query chunk can see is skipped like a masked
// one, and one that not every row sees whole keeps its per-row bounds.
std::vector<Block> blocks_for(const SequenceLayout& layout, int64_t rank, int64_t owner, bool causal,
                              const at::Tensor& doc_start, int64_t c) {
  const std::vector<int64_t> qs = layout.chunks_of(rank), ks = layout.chunks_of(owner);
  std::vector<Block> out;
  for (int64_t i = 0; i < static_cast<int64_t>(qs.size()); ++i) {
    for (int64_t j = 0; j < static_cast<int64_t>(ks.size()); ++j) {
      const BlockKind kind = block_kind(qs[i], ks[j], causal);
      if (kind == BlockKind::masked) continue;
      at::Tensor key_begin;
      if (doc_start.defined()) {
        const at::Tensor keys = at::arange(ks[j] * c, (ks[j] + 1) * c, at::kLong);
        key_begin = ops::document_key_begin(doc_start.narrow(1, i * c, c), keys);
        if (key_begin.min().item<int64_t>() == c) continue;           // every row's document starts later
        if (key_begin.max().item<int64_t>() == 0) key_begin = at::Tensor();  // every row sees every key
      }
      if (kind == BlockKind::full && !key_begin.defined() && !out.empty() && out.back().q == i &&
          !out.back().causal && !out.back().key_begin.defined() && out.back().kv_begin + out.back().kv_count == j) {
        ++out.back().kv_count;
        continue;
      }
      out.push_back({i, j, 1, kind == BlockKind::diagonal, key_begin});
    }
  }
  return out;
}

int right_of(const dist::ProcessGroup& g) { return (g.rank() + 1) % g.size(); }
int left_of(const dist::ProcessGroup& g) { return (g.rank() + g.size() - 1) % g.size(); }

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const dist::ProcessGroup& group,
                  const RingAttentionOptions& opts, const at::Tensor& doc_start) {
  TITAN_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "ring attention: q, k, v must be [batch, heads, seq, head_dim]");
  TITAN_CHECK(k.sizes() == v.sizes(), "ring attention: k ", k.sizes(), " and v ", v.sizes(), " differ");
  TITAN_CHECK(q.size(2) == k.size(2), "ring attention: ", q.size(2), " local queries but ", k.size(2),
              " local keys (every rank holds the same positions of q, k and v)");
  TITAN_CHECK(opts.layout.cp == group.size(), "ring attention: the layout is for ", opts.layout.cp,
              " ranks but the cp group ", group.name(), " has ", group.size());
  TITAN_CHECK(q.size(2) % opts.layout.chunks_per_rank() == 0, "ring attention: local sequence ", q.size(2),
              " does not hold ", opts.layout.chunks_per_rank(), " equal chunks");
  if (!doc_start.defined()) return;
  TITAN_CHECK(opts.causal, "ring attention: document masking (doc_start) is block-causal; it needs causal = true");
  TITAN_CHECK(doc_start.scalar_type() == at::kLong && doc_start.dim() == 2 && doc_start.size(0) == q.size(0) &&
                  doc_start.size(1) == q.size(2),
              "ring attention: doc_start must be int64 [", q.size(0), ", ", q.size(2), "] (this rank's shard), got ",
              doc_start.scalar_type(), " ", doc_start.sizes());
}

// This rank's document starts on the CPU, checked against the window
// positions its rows hold: 0 <= doc_start <= position (a start in window
// coordinates, not the shard's). Undefined passes through. The block plan
// is made on the host (which blocks to skip is a host decision), so on a
// GPU this is one small device-to-host copy, once per batch (ring_plan).
at::Tensor host_doc_start(const at::Tensor& doc_start, const RingAttentionOptions& opts, int64_t rank) {
  if (!doc_start.defined()) return doc_start;
  const at::Tensor d = doc_start.to(at::kCPU).contiguous();
  const at::Tensor pos = shard_positions(d.size(1) * opts.layout.cp, opts.layout, rank);
  TITAN_CHECK(((d >= 0) & (d <= pos)).all().item<bool>(),
              "ring attention: doc_start must hold window positions with 0 <= doc_start[i] <= i for the positions "
              "this rank holds (the full sequence's document_starts, sharded like the tokens)");
  return d;
}

// The blocks of every owner for this rank: the ring's plan. Without
// documents it is host arithmetic, made per call. With them it depends on
// the batch's doc_start only, yet every layer's forward and backward would
// copy doc_start to the host (a device-to-host sync on a GPU) and upload
// each block's key bounds (a blocking host-to-device copy per block): so it
// is made once per doc_start tensor and kept, key bounds already on the
// attention's device. A hit needs the very tensor (held by the entry, so it
// cannot be freed and another take its place), unchanged (its version), and
// the same rank, layout, chunk length and device. Backward runs on
// autograd's threads, hence the mutex.
struct RingPlan {
  std::vector<std::vector<Block>> by_owner;  // indexed by owner rank
};

struct PlanEntry {
  at::Tensor source;
  int64_t version = 0;
  std::string key;
  std::shared_ptr<const RingPlan> plan;
};

std::shared_ptr<const RingPlan> make_plan(const at::Tensor& doc_start_in, const RingAttentionOptions& opts,
                                          int64_t rank, int64_t n, int64_t c, const c10::Device& device) {
  auto plan = std::make_shared<RingPlan>();
  const at::Tensor doc_start = host_doc_start(doc_start_in, opts, rank);
  plan->by_owner.resize(static_cast<size_t>(n));
  for (int64_t owner = 0; owner < n; ++owner) {
    std::vector<Block> blocks = blocks_for(opts.layout, rank, owner, opts.causal, doc_start, c);
    for (Block& b : blocks)
      if (b.key_begin.defined()) b.key_begin = b.key_begin.to(device);
    plan->by_owner[static_cast<size_t>(owner)] = std::move(blocks);
  }
  return plan;
}

std::shared_ptr<const RingPlan> ring_plan(const at::Tensor& doc_start_in, const RingAttentionOptions& opts,
                                          int64_t rank, int64_t n, int64_t c, const c10::Device& device) {
  if (!doc_start_in.defined()) return make_plan(doc_start_in, opts, rank, n, c, device);
  static std::mutex mu;
  static std::deque<PlanEntry> entries;
  constexpr size_t kEntries = 8;  // a micro-batch needs one; pipelines keep a few in flight
  std::string key = std::to_string(rank) + "/" + std::to_string(n) + " c" + std::to_string(c) +
                    (opts.causal ? " causal " : " ") + std::to_string(opts.layout.cp) + ":" +
                    std::to_string(static_cast<int>(opts.layout.balance)) + " " + device.str();
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const PlanEntry& e : entries)
      if (e.source.unsafeGetTensorImpl() == doc_start_in.unsafeGetTensorImpl() &&
          e.version == doc_start_in._version() && e.key == key)
        return e.plan;
  }
  std::shared_ptr<const RingPlan> plan = make_plan(doc_start_in, opts, rank, n, c, device);  // checks; may throw
  std::lock_guard<std::mutex> lock(mu);
  entries.push_back({doc_start_in, doc_start_in._version(), key, plan});
  if (entries.size() > kEntries) entries.pop_front();
  return plan;
}

// The running per-query-chunk result of the forward.
struct Accumulator {
  std::vector<at::Tensor> out, lse;  // fp32, one per local query chunk (undefined until a block lands)
  explicit Accumulator(int64_t chunks) : out(static_cast<size_t>(chunks)), lse(static_cast<size_t>(chunks)) {}
  void add(int64_t i, const ops::FlashForward& f) {
    auto& o = out[static_cast<size_t>(i)];
    auto& l = lse[static_cast<size_t>(i)];
    if (!o.defined()) {
      o = f.out.to(at::kFloat).contiguous();
      if (o.data_ptr() == f.out.data_ptr()) o = o.clone();  // own the buffer: it is updated in place
      l = f.lse.clone();
    } else {
      ops::merge_attention_partial(o, l, f.out, f.lse);
    }
  }
};

// Forward blocks of this rank's queries against owner's K/V pieces.
void forward_blocks(const at::Tensor& q, const at::Tensor& ks, const at::Tensor& vs, int64_t owner,
                    const RingAttentionOptions& opts, const RingPlan& plan, Accumulator& acc) {
  // One range per step's blocks: traces (and the overlap test) see the
  // compute that the step's transfer runs under.
  TITAN_PROFILE_RANGE("titan::ring_attention_blocks");
  const int64_t c = q.size(2) / opts.layout.chunks_per_rank();
  for (const Block& b : plan.by_owner[static_cast<size_t>(owner)]) {
    const at::Tensor qb = q.narrow(2, b.q * c, c);
    const at::Tensor kb = ks.narrow(2, b.kv_begin * c, b.kv_count * c);
    const at::Tensor vb = vs.narrow(2, b.kv_begin * c, b.kv_count * c);
    acc.add(b.q, ops::attention_forward_lse(qb, kb, vb, b.causal, opts.scale, b.key_begin));
  }
}

// Backward blocks against owner's K/V: dq accumulated in place, the
// owner's dk/dv (fp32, like ks) returned.
std::pair<at::Tensor, at::Tensor> backward_blocks(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& out,
                                                  const at::Tensor& lse, const at::Tensor& ks, const at::Tensor& vs,
                                                  int64_t owner, const RingAttentionOptions& opts,
                                                  const RingPlan& plan, at::Tensor& dq) {
  TITAN_PROFILE_RANGE("titan::ring_attention_blocks");
  const int64_t c = q.size(2) / opts.layout.chunks_per_rank();
  at::Tensor dk = at::zeros(ks.sizes(), ks.options().dtype(at::kFloat));
  at::Tensor dv = at::zeros(vs.sizes(), vs.options().dtype(at::kFloat));
  for (const Block& b : plan.by_owner[static_cast<size_t>(owner)]) {
    auto rows = [&](const at::Tensor& t) { return t.narrow(2, b.q * c, c); };
    auto keys = [&](const at::Tensor& t) { return t.narrow(2, b.kv_begin * c, b.kv_count * c); };
    const ops::FlashGrads g = ops::attention_backward_lse(rows(dout), rows(q), keys(ks), keys(vs), rows(out),
                                                          rows(lse), b.causal, opts.scale, b.key_begin);
    rows(dq).add_(g.dq);
    keys(dk).add_(g.dk);
    keys(dv).add_(g.dv);
  }
  return {dk, dv};
}

// One step's neighbour exchange: send `a`, `b` right, receive the same
// shapes from the left.
struct RingTransfer {
  at::Tensor in_a, in_b;
  std::vector<std::shared_ptr<dist::PendingWork>> works;
  RingTransfer(const dist::ProcessGroup& g, const at::Tensor& a, const at::Tensor& b, int tag_a, int tag_b) {
    in_a = at::empty_like(a, at::MemoryFormat::Contiguous);
    in_b = at::empty_like(b, at::MemoryFormat::Contiguous);
    works = g.batch_p2p_async({{true, a, right_of(g), tag_a},
                               {true, b, right_of(g), tag_b},
                               {false, in_a, left_of(g), tag_a},
                               {false, in_b, left_of(g), tag_b}});
  }
  void wait() {
    for (auto& w : works) w->wait();
  }
};

ops::FlashForward finish(Accumulator& acc, const at::Tensor& q) {
  const int64_t c = q.size(2) / static_cast<int64_t>(acc.out.size());
  for (size_t i = 0; i < acc.out.size(); ++i) {
    if (acc.out[i].defined()) continue;  // a chunk that saw no key (non-causal never; causal has its diagonal)
    acc.out[i] = at::zeros({q.size(0), q.size(1), c, q.size(3)}, q.options().dtype(at::kFloat));
    acc.lse[i] = at::full({q.size(0), q.size(1), c}, -std::numeric_limits<float>::infinity(),
                          q.options().dtype(at::kFloat));
  }
  return {at::cat(acc.out, 2).to(q.scalar_type()), at::cat(acc.lse, 2)};
}

}  // namespace

ops::FlashForward ring_attention_forward(const at::Tensor& q, const at::Tensor& k_in, const at::Tensor& v_in,
                                         const dist::ProcessGroup& group, const RingAttentionOptions& opts,
                                         const at::Tensor& doc_start_in) {
  check_inputs(q, k_in, v_in, group, opts, doc_start_in);
  TITAN_PROFILE_RANGE("titan::ring_attention_forward");
  const int n = group.size(), r = group.rank();
  const at::Tensor k = k_in.contiguous(), v = v_in.contiguous();
  const std::shared_ptr<const RingPlan> plan =
      ring_plan(doc_start_in, opts, r, n, q.size(2) / opts.layout.chunks_per_rank(), q.device());
  const int64_t sl = k.size(2);
  Accumulator acc(opts.layout.chunks_per_rank());
  // Both methods visit the owners in the same order (r, r−1, ...) so that
  // the merges round alike.
  if (opts.rotate == RotateMethod::allgather) {
    const at::Tensor kg = group.all_gather(k, 2), vg = group.all_gather(v, 2);
    for (int t = 0; t < n; ++t) {
      const int owner = (r - t + n) % n;
      forward_blocks(q, kg.narrow(2, owner * sl, sl), vg.narrow(2, owner * sl, sl), owner, opts, *plan, acc);
    }
    return finish(acc, q);
  }
  at::Tensor ks = k, vs = v;
  for (int t = 0; t < n; ++t) {
    const int owner = (r - t + n) % n;
    // The next block's transfer goes out before this block is computed.
    std::unique_ptr<RingTransfer> next;
    if (t + 1 < n) next = std::make_unique<RingTransfer>(group, ks, vs, kTagK + t, kTagV + t);
    forward_blocks(q, ks, vs, owner, opts, *plan, acc);
    if (next) {
      next->wait();
      ks = next->in_a, vs = next->in_b;
    }
  }
  return finish(acc, q);
}

ops::FlashGrads ring_attention_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k_in,
                                        const at::Tensor& v_in, const at::Tensor& out, const at::Tensor& lse,
                                        const dist::ProcessGroup& group, const RingAttentionOptions& opts,
                                        const at::Tensor& doc_start_in) {
  check_inputs(q, k_in, v_in, group, opts, doc_start_in);
  TITAN_PROFILE_RANGE("titan::ring_attention_backward");
  const int n = group.size(), r = group.rank();
  const at::Tensor k = k_in.contiguous(), v = v_in.contiguous();
  const std::shared_ptr<const RingPlan> plan =
      ring_plan(doc_start_in, opts, r, n, q.size(2) / opts.layout.chunks_per_rank(), q.device());
  const int64_t sl = k.size(2);
  at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
  if (opts.rotate == RotateMethod::allgather) {
    const at::Tensor kg = group.all_gather(k, 2), vg = group.all_gather(v, 2);
    at::Tensor dkg = at::empty(kg.sizes(), kg.options().dtype(at::kFloat));
    at::Tensor dvg = at::empty(vg.sizes(), vg.options().dtype(at::kFloat));
    for (int t = 0; t < n; ++t) {
      const int owner = (r - t + n) % n;
      auto [dk, dv] = backward_blocks(dout, q, out, lse, kg.narrow(2, owner * sl, sl), vg.narrow(2, owner * sl, sl),
                                      owner, opts, *plan, dq);
      dkg.narrow(2, owner * sl, sl).copy_(dk);
      dvg.narrow(2, owner * sl, sl).copy_(dv);
    }
    // Every rank's share of each owner's dK/dV, summed onto the owner.
    return {dq.to(q.scalar_type()), group.reduce_scatter(dkg, 2).to(k.scalar_type()),
            group.reduce_scatter(dvg, 2).to(v.scalar_type())};
  }
  at::Tensor ks = k, vs = v;
  std::unique_ptr<RingTransfer> grads;  // the dK/dV accumulator travelling right
  for (int t = 0; t < n; ++t) {
    const int owner = (r - t + n) % n;
    std::unique_ptr<RingTransfer> next;
    if (t + 1 < n) next = std::make_unique<RingTransfer>(group, ks, vs, kTagK + t, kTagV + t);
    auto [dk, dv] = backward_blocks(dout, q, out, lse, ks, vs, owner, opts, *plan, dq);
    // The accumulator for `owner` arrives from the left holding the shares
    // of ranks owner .. r−1; add ours and pass it on.
    if (grads) {
      grads->wait();
      dk.add_(grads->in_a), dv.add_(grads->in_b);
    }
    grads = std::make_unique<RingTransfer>(group, dk, dv, kTagDk + t, kTagDv + t);
    if (next) {
      next->wait();
      ks = next->in_a, vs = next->in_b;
    }
  }
  // After n hops the accumulator that arrives is our own, complete.
  grads->wait();
  return {dq.to(q.scalar_type()), grads->in_a.to(k.scalar_type()), grads->in_b.to(v.scalar_type())};
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const dist::ProcessGroup& group_of(int64_t h) {
  return *reinterpret_cast<const dist::ProcessGroup*>(static_cast<intptr_t>(h));
}

// doc_start travels wrapped: as a plain at::Tensor argument autograd would
// treat it as an input (and reject it when undefined); it needs no gradient.
struct DocumentStarts {
  at::Tensor starts;
};

struct RingAttentionFunction : torch::autograd::Function<RingAttentionFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int64_t group_handle, RingAttentionOptions opts, DocumentStarts doc) {
    ops::FlashForward f = ring_attention_forward(q, k, v, group_of(group_handle), opts, doc.starts);
    ctx->save_for_backward({q, k, v, f.out, f.lse});
    ctx->saved_data["doc_start"] = doc.starts;
    ctx->saved_data["group"] = group_handle;
    ctx->saved_data["cp"] = opts.layout.cp;
    ctx->saved_data["balance"] = static_cast<int64_t>(opts.layout.balance);
    ctx->saved_data["rotate"] = static_cast<int64_t>(opts.rotate);
    ctx->saved_data["causal"] = opts.causal;
    ctx->saved_data["scale"] = opts.scale.value_or(-1.0);
    return f.out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    RingAttentionOptions opts;
    opts.layout.cp = ctx->saved_data["cp"].toInt();
    opts.layout.balance = static_cast<LoadBalance>(ctx->saved_data["balance"].toInt());
    opts.rotate = static_cast<RotateMethod>(ctx->saved_data["rotate"].toInt());
    opts.causal = ctx->saved_data["causal"].toBool();
    const double scale = ctx->saved_data["scale"].toDouble();
    if (scale > 0) opts.scale = scale;
    ops::FlashGrads g = ring_attention_backward(grads[0], s[0], s[1], s[2], s[3], s[4],
                                                group_of(ctx->saved_data["group"].toInt()), opts,
                                                ctx->saved_data["doc_start"].toTensor());
    return {g.dq, g.dk, g.dv, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const dist::ProcessGroup& group, const RingAttentionOptions& opts,
                          const at::Tensor& doc_start) {
  return RingAttentionFunction::apply(q, k, v, static_cast<int64_t>(reinterpret_cast<intptr_t>(&group)), opts,
                                      DocumentStarts{doc_start});
}

}  // namespace titan::cp
