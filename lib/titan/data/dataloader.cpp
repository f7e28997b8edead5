#include "titan/data/dataloader.hpp"

#include "titan/ops/attention/document_mask.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "titan/util/error.hpp"

namespace titan::data {
namespace {

// Checked before the stream opens the data, so that a bad option is named
// rather than surfacing as a stream error.
const DataLoaderOptions& checked(const DataLoaderOptions& o) {
  TITAN_CHECK(o.seq_len > 0, "training.seq_len must be positive, got ", o.seq_len);
  TITAN_CHECK(o.batch_size > 0, "the local batch size must be positive, got ", o.batch_size);
  return o;
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Tokenizer> tokenizer, const DataLoaderOptions& options)
    : tokenizer_(tokenizer),
      options_(checked(options)),
      stream_(std::move(tokenizer), resolve_dataset_path(options.dataset, options.dataset_path), options.seq_len + 1,
              options.dp_rank, options.dp_world, dataset_split_prefix(options.dataset)) {}

Batch DataLoader::next() {
  const int64_t b = options_.batch_size, s = options_.seq_len;
  at::Tensor windows = at::empty({b, s + 1}, at::kLong);
  int64_t* data = windows.data_ptr<int64_t>();
  for (int64_t i = 0; i < b; ++i) stream_.next_window(data + i * (s + 1));
  // Copies, not views: with one sequence a narrowed [1, s] slice counts as
  // contiguous, so .contiguous() would hand back views of one storage and
  // hiding a label below would overwrite the next input token.
  Batch batch{windows.narrow(1, 0, s).clone(at::MemoryFormat::Contiguous),
              windows.narrow(1, 1, s).clone(at::MemoryFormat::Contiguous), {}};
  if (options_.document_masking) {
    // Documents are BOS + text + EOS in the stream: a BOS opens one.
    const int64_t bos = tokenizer_->bos_id();
    batch.doc_start = ops::document_starts(batch.inputs, bos);
    batch.labels.masked_fill_(batch.labels == bos, -100);
  }
  return batch;
}

nlohmann::json DataLoader::state_dict() const { return stream_.state().to_json(); }

void DataLoader::load_state_dict(const nlohmann::json& state) {
  stream_.load_state(TokenStreamState::from_json(state));
}

}  // namespace titan::data
