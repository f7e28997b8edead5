#include "titan/ops/attention/document_mask.hpp"

#include <ATen/ATen.h>

#include <atomic>
#include <deque>
#include <limits>
#include <mutex>
#include <string>

#include "titan/util/error.hpp"

namespace titan::ops {

at::Tensor document_starts(const at::Tensor& tokens, int64_t bos_id) {
  TITAN_CHECK(tokens.dim() == 2, "document_starts: tokens must be [batch, seq], got ", tokens.sizes());
  const int64_t seq = tokens.size(1);
  const at::Tensor pos = at::arange(seq, tokens.options().dtype(at::kLong)).expand_as(tokens);
  // A BOS marks its own position; elsewhere 0; the running maximum carries
  // the last BOS forward (positions only grow).
  const at::Tensor marks = at::where(tokens == bos_id, pos, at::zeros_like(pos));
  return std::get<0>(at::cummax(marks, 1)).contiguous();
}

at::Tensor document_positions(const at::Tensor& doc_start, const at::Tensor& positions) {
  if (!positions.defined()) return at::arange(doc_start.size(-1), doc_start.options()) - doc_start;
  TITAN_CHECK(positions.dim() == 1 && positions.size(0) == doc_start.size(-1), "document_positions: ",
              positions.sizes(), " positions for doc_start ", doc_start.sizes());
  return positions.to(doc_start.device(), at::kLong) - doc_start;
}

at::Tensor block_causal_mask(const at::Tensor& doc_start) {
  return key_range_mask(doc_start, doc_start.size(1), /*causal=*/true);
}

at::Tensor block_causal_bias(const at::Tensor& doc_start, at::ScalarType dtype) {
  const at::Tensor visible = block_causal_mask(doc_start);
  return at::zeros(visible.sizes(), doc_start.options().dtype(dtype))
      .masked_fill_(visible.logical_not(), -std::numeric_limits<double>::infinity());
}

at::Tensor document_key_begin(const at::Tensor& doc_start, const at::Tensor& key_positions) {
  TITAN_CHECK(doc_start.dim() == 2 && key_positions.dim() == 1, "document_key_begin: doc_start must be [batch, "
              "seq] and key_positions [keys], got ", doc_start.sizes(), " and ", key_positions.sizes());
  // The keys are ascending, so those before a row's document start are a
  // prefix of the block: its length is where the start would be inserted.
  return at::searchsorted(key_positions.to(doc_start.device(), at::kLong).contiguous(), doc_start.contiguous(),
                          /*out_int32=*/false, /*right=*/false);
}

at::Tensor key_range_mask(const at::Tensor& key_begin, int64_t keys, bool causal) {
  const int64_t sq = key_begin.size(1);
  const at::Tensor j = at::arange(keys, key_begin.options()).view({1, 1, 1, keys});
  const at::Tensor begin = key_begin.view({key_begin.size(0), 1, sq, 1});
  if (!causal) return j >= begin;
  const at::Tensor i = at::arange(sq, key_begin.options()).view({1, 1, sq, 1});
  return (j <= i) & (j >= begin);
}

namespace {

// int64 [batch, rows] on the CPU, 0 <= d[i] <= limit[i], never decreasing
// along a row: what the kernels rely on (`rule` says it in the error).
at::Tensor checked_rows(const at::Tensor& t, const char* name, int64_t batch, int64_t rows, const at::Tensor& limit,
                        const char* who, const char* rule) {
  TITAN_CHECK(t.scalar_type() == at::kLong && t.dim() == 2 && t.size(0) == batch && t.size(1) == rows, who, ": ",
              name, " must be int64 [", batch, ", ", rows, "], got ", t.scalar_type(), " ", t.sizes());
  const at::Tensor d = t.to(at::kCPU).contiguous();
  if (rows > 0) {
    const bool in_range = ((d >= 0) & (d <= limit)).all().item<bool>();
    const bool monotone = rows < 2 || (d.narrow(1, 1, rows - 1) >= d.narrow(1, 0, rows - 1)).all().item<bool>();
    TITAN_CHECK(in_range && monotone, who, ": ", name, " must satisfy ", rule);
  }
  return d;
}

// The row bounds already checked, so that the same tensor is checked (and,
// on a GPU, copied to the host: a device-to-host sync) once per batch, not
// in every layer's forward and again in its backward. A hit needs the very
// tensor (the entry holds a reference, so its TensorImpl and storage cannot
// be freed and reused by another tensor meanwhile), unchanged since (its
// version counter) and checked against the same rule and sizes. Backward
// runs on autograd's threads, hence the mutex.
struct CheckedEntry {
  at::Tensor source;   // the tensor that was checked (held)
  int64_t version = 0;
  std::string key;     // rule and sizes
  at::Tensor checked;  // its contiguous CPU copy, what the callers use
};
std::mutex& cache_mutex() {
  static std::mutex mu;
  return mu;
}
std::deque<CheckedEntry>& cache() {
  static std::deque<CheckedEntry> entries;
  return entries;
}
std::atomic<int64_t> g_checks_run{0};
// Enough for a batch's doc_start and a ring plan's per-block key bounds
// (cp x chunks per rank blocks), which every layer visits in turn: fewer
// entries than that and the round-robin would evict each before its reuse.
constexpr size_t kCacheEntries = 64;

template <typename Check>
at::Tensor checked_once(const at::Tensor& t, const std::string& key, const Check& check) {
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    for (const CheckedEntry& e : cache())
      if (e.source.unsafeGetTensorImpl() == t.unsafeGetTensorImpl() && e.version == t._version() && e.key == key)
        return e.checked;
  }
  at::Tensor checked = check();  // throws for bad bounds: nothing is cached then
  g_checks_run.fetch_add(1);
  std::lock_guard<std::mutex> lock(cache_mutex());
  cache().push_back({t, t._version(), key, checked});
  if (cache().size() > kCacheEntries) cache().pop_front();
  return checked;
}

std::string cache_key(const char* kind, bool causal, int64_t batch, int64_t rows, int64_t keys) {
  return std::string(kind) + (causal ? " causal " : " ") + std::to_string(batch) + "x" + std::to_string(rows) +
         " keys " + std::to_string(keys);
}

}  // namespace

at::Tensor checked_document_starts(const at::Tensor& doc_start, bool causal, int64_t batch, int64_t seq,
                                   const char* who) {
  if (!doc_start.defined()) return doc_start;
  TITAN_CHECK(causal, who, ": document masking (doc_start) is block-causal; it needs causal = true");
  return checked_once(doc_start, cache_key("doc_start", causal, batch, seq, seq), [&] {
    return checked_rows(doc_start, "doc_start", batch, seq, at::arange(seq, at::kLong), who,
                        "0 <= doc_start[i] <= i and never decrease along a sequence (contiguous documents; see "
                        "ops::document_starts)");
  });
}

at::Tensor checked_key_begin(const at::Tensor& key_begin, bool causal, int64_t batch, int64_t sq, int64_t keys,
                             const char* who) {
  if (!key_begin.defined()) return key_begin;
  return checked_once(key_begin, cache_key("key_begin", causal, batch, sq, keys), [&] {
    const at::Tensor limit = causal ? at::arange(sq, at::kLong).clamp_max(keys) : at::full({sq}, keys, at::kLong);
    return checked_rows(
        key_begin, "key_begin", batch, sq, limit, who,
        causal ? "0 <= key_begin[i] <= min(i, keys) and never decrease along a row (see ops::document_key_begin)"
               : "0 <= key_begin[i] <= keys and never decrease along a row (see ops::document_key_begin)");
  });
}

int64_t row_bound_checks_run() { return g_checks_run.load(); }

}  // namespace titan::ops
