#include "titan/dtensor/placement.hpp"

#include <algorithm>
#include <sstream>

namespace titan {

std::string Placement::str() const {
  switch (kind) {
    case Kind::Shard: return "Shard(" + std::to_string(dim) + ")";
    case Kind::Replicate: return "Replicate()";
    case Kind::Partial: return reduce == dist::ReduceOp::Avg ? "Partial(avg)" : "Partial(sum)";
  }
  return "?";
}

bool Placement::operator==(const Placement& o) const {
  if (kind != o.kind) return false;
  if (kind == Kind::Shard) return dim == o.dim;
  if (kind == Kind::Partial) return reduce == o.reduce;
  return true;
}

std::string to_string(const Placements& placements) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < placements.size(); ++i) os << (i ? ", " : "") << placements[i].str();
  os << "]";
  return os.str();
}

std::pair<int64_t, int64_t> shard_size_and_offset(int64_t size, int64_t chunks, int64_t index) {
  int64_t full = (size + chunks - 1) / chunks;
  int64_t offset = std::min(size, full * index);
  int64_t len = std::max<int64_t>(0, std::min(size, offset + full) - offset);
  return {len, offset};
}

}  // namespace titan
