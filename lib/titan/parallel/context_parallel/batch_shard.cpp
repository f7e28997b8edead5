#include "titan/parallel/context_parallel/batch_shard.hpp"

#include "titan/parallel/context_parallel/sharding.hpp"

namespace titan::cp {

void keep_sequence_shard(data::Batch& b, const ContextParallel& context) {
  const SequenceLayout& layout = context.attention.layout;
  b.inputs = shard_sequence(b.inputs, 1, layout, context.rank()).contiguous();
  b.labels = shard_sequence(b.labels, 1, layout, context.rank()).contiguous();
  if (b.doc_start.defined()) b.doc_start = shard_sequence(b.doc_start, 1, layout, context.rank()).contiguous();
}

}  // namespace titan::cp
