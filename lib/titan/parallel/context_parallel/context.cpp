#include "titan/parallel/context_parallel/context.hpp"

#include "titan/dist/process_group.hpp"
#include "titan/util/error.hpp"

namespace titan::cp {

int64_t ContextParallel::rank() const { return group->rank(); }

at::Tensor ContextParallel::positions(int64_t seq_len) const {
  return shard_positions(seq_len, attention.layout, rank());
}

std::shared_ptr<const ContextParallel> make_context_parallel(std::shared_ptr<dist::ProcessGroup> group,
                                                             LoadBalance balance, RotateMethod rotate) {
  TITAN_CHECK(group != nullptr, "context parallel: no cp group");
  auto c = std::make_shared<ContextParallel>();
  c->attention.layout = {static_cast<int64_t>(group->size()), balance};
  c->attention.rotate = rotate;
  c->attention.causal = true;
  c->group = std::move(group);
  return c;
}

}  // namespace titan::cp
