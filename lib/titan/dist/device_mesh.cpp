#include "titan/dist/device_mesh.hpp"

#include <numeric>
#include <sstream>

#include "titan/dist/world.hpp"
#include "titan/util/error.hpp"

namespace titan::dist {
namespace {

int64_t row_major(const std::vector<int64_t>& coord, const std::vector<int64_t>& shape) {
  int64_t r = 0;
  for (size_t i = 0; i < shape.size(); ++i) r = r * shape[i] + coord[i];
  return r;
}

}  // namespace

DeviceMesh::DeviceMesh(const World& world, std::vector<int64_t> shape, std::vector<std::string> names)
    : shape_(std::move(shape)), names_(std::move(names)), world_(&world) {
  TITAN_CHECK(shape_.size() == names_.size(), "DeviceMesh: ", shape_.size(), " sizes but ",
              names_.size(), " names");
  int64_t total = 1;
  for (size_t i = 0; i < shape_.size(); ++i) {
    TITAN_CHECK(shape_[i] >= 1, "DeviceMesh: dimension '", names_[i], "' has size ", shape_[i]);
    for (size_t j = 0; j < i; ++j)
      TITAN_CHECK(names_[i] != names_[j], "DeviceMesh: dimension name '", names_[i], "' repeats");
    total *= shape_[i];
  }
  TITAN_CHECK(total == world.size(), "DeviceMesh ", describe(), " needs ", total,
              " ranks but the world has ", world.size());
  root_shape_ = shape_;
  coord_.assign(shape_.size(), 0);
  int64_t rest = world.rank();
  for (int i = ndim() - 1; i >= 0; --i) {
    coord_[i] = rest % shape_[i];
    rest /= shape_[i];
  }
  root_coord_ = coord_;
  root_dims_.resize(shape_.size());
  std::iota(root_dims_.begin(), root_dims_.end(), 0);
  flat_ = std::make_shared<std::map<std::string, Flat>>();
  // Every rank makes its groups in the same dimension order, so the
  // rendezvous of one group never waits on a group a peer has not reached.
  for (int d = 0; d < ndim(); ++d) groups_.push_back(make_group(world, {d}, names_[d]));
}

std::shared_ptr<ProcessGroup> DeviceMesh::make_group(const World& world, const std::vector<int>& dims,
                                                     const std::string& name) const {
  std::vector<int64_t> sub_shape;
  for (int d : dims) sub_shape.push_back(root_shape_[d]);
  int64_t n = 1;
  for (int64_t s : sub_shape) n *= s;
  std::vector<int> members;
  std::vector<int64_t> c = root_coord_;
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i;
    for (int k = static_cast<int>(dims.size()) - 1; k >= 0; --k) {
      c[dims[k]] = rest % sub_shape[k];
      rest /= sub_shape[k];
    }
    members.push_back(static_cast<int>(row_major(c, root_shape_)));
  }
  return world.new_group(name, members);
}

int64_t DeviceMesh::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

int DeviceMesh::dim_index(const std::string& name) const {
  for (int i = 0; i < ndim(); ++i)
    if (names_[i] == name) return i;
  std::ostringstream known;
  for (const auto& n : names_) known << " " << n;
  for (const auto& [n, f] : *flat_) known << " " << n;
  throw Error("DeviceMesh has no dimension '" + name + "' (it has:" + known.str() + ")");
}

bool DeviceMesh::has_dim(const std::string& name) const {
  for (const auto& n : names_)
    if (n == name) return true;
  return flat_->count(name) > 0;
}

bool DeviceMesh::has_plain_dim(const std::string& name) const {
  for (const auto& n : names_)
    if (n == name) return true;
  return false;
}

int64_t DeviceMesh::size(const std::string& name) const {
  if (auto it = flat_->find(name); it != flat_->end()) return it->second.size;
  return shape_[dim_index(name)];
}

int64_t DeviceMesh::local_rank(const std::string& name) const {
  if (auto it = flat_->find(name); it != flat_->end()) return it->second.local_rank;
  return coord_[dim_index(name)];
}

std::shared_ptr<ProcessGroup> DeviceMesh::group(const std::string& name) const {
  if (auto it = flat_->find(name); it != flat_->end()) return it->second.group;
  return groups_[dim_index(name)];
}

DeviceMesh DeviceMesh::operator[](const std::string& name) const {
  return (*this)[std::vector<std::string>{name}];
}

DeviceMesh DeviceMesh::operator[](const std::vector<std::string>& names) const {
  DeviceMesh sub;
  sub.world_ = world_;
  sub.flat_ = flat_;
  sub.root_shape_ = root_shape_;
  sub.root_coord_ = root_coord_;
  for (const auto& name : names) {
    if (auto it = flat_->find(name); it != flat_->end() && !has_plain_dim(name)) {
      // A flattened dimension stands as one dimension of the sub-mesh; it
      // has no single root dim, so rank_at is not defined across it.
      sub.names_.push_back(name);
      sub.shape_.push_back(it->second.size);
      sub.coord_.push_back(it->second.local_rank);
      sub.groups_.push_back(it->second.group);
      sub.root_dims_.push_back(-1);
      continue;
    }
    int d = dim_index(name);
    sub.names_.push_back(name);
    sub.shape_.push_back(shape_[d]);
    sub.coord_.push_back(coord_[d]);
    sub.groups_.push_back(groups_[d]);
    sub.root_dims_.push_back(root_dims_[d]);
  }
  return sub;
}

DeviceMesh DeviceMesh::flatten(const std::vector<std::string>& dims, const std::string& new_name) {
  TITAN_CHECK(!dims.empty(), "DeviceMesh::flatten needs at least one dimension");
  if (flat_->count(new_name) == 0) {
    TITAN_CHECK(!has_plain_dim(new_name), "DeviceMesh::flatten: '", new_name, "' is already a dimension");
    std::vector<int> root;
    int64_t size = 1, local = 0;
    for (const auto& name : dims) {
      int d = dim_index(name);
      TITAN_CHECK(root_dims_[d] >= 0, "DeviceMesh::flatten: '", name, "' is itself flattened");
      root.push_back(root_dims_[d]);
      local = local * shape_[d] + coord_[d];
      size *= shape_[d];
    }
    TITAN_CHECK(world_ != nullptr, "DeviceMesh::flatten on a mesh without a world");
    (*flat_)[new_name] = Flat{size, local, make_group(*world_, root, new_name)};
  }
  return (*this)[new_name];
}

int DeviceMesh::rank_at(const std::vector<int64_t>& coordinate) const {
  TITAN_CHECK(coordinate.size() == shape_.size(), "DeviceMesh::rank_at: coordinate has ",
              coordinate.size(), " entries for a ", ndim(), "-D mesh");
  std::vector<int64_t> c = root_coord_;
  for (size_t i = 0; i < coordinate.size(); ++i) {
    TITAN_CHECK(root_dims_[i] >= 0, "DeviceMesh::rank_at across flattened dimension '", names_[i], "'");
    c[root_dims_[i]] = coordinate[i];
  }
  return static_cast<int>(row_major(c, root_shape_));
}

std::string DeviceMesh::describe() const {
  std::ostringstream os;
  for (size_t i = 0; i < shape_.size(); ++i) os << (i ? " x " : "") << names_[i] << "=" << shape_[i];
  return os.str();
}

}  // namespace titan::dist
