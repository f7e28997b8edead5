#pragma once
/// @file
/// @brief A model's tensors read one at a time: their names, shapes and
/// dtypes known up front (meta tensors), each value read from disk only
/// when asked for. `titan convert`'s sources (a titan checkpoint, a Hugging
/// Face folder) and renames (torchtitan 0.3's names) are streams and its
/// writers take one, so a conversion holds the tensor it is writing (or
/// the three a fused wqkv is made of), never the model: a 405B model
/// converts on a machine that holds its largest tensor.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace titan::checkpoint {

struct CheckpointInfo;

/// @brief Tensors by name, each read when asked for.
struct TensorStream {
  /// Every tensor's name with its shape and dtype, as meta tensors (no data).
  std::map<std::string, at::Tensor> layout;
  /// The whole tensor `name` (a key of `layout`, with its shape and dtype)
  /// on the CPU, read when called; the caller keeps it as long as it needs.
  std::function<at::Tensor(const std::string& name)> read;

  /// Elements of all tensors.
  int64_t numel() const;
  /// Every tensor read: the whole model in memory (small models, tests).
  std::map<std::string, at::Tensor> read_all() const;
};

/// @brief A meta tensor with `t`'s shape and dtype (a layout entry).
at::Tensor meta_like(const at::Tensor& t);

/// @brief A stream over tensors already in memory (read returns them as they are).
TensorStream stream_of(const std::map<std::string, at::Tensor>& tensors);

/// @brief The model tensors of the titan checkpoint `ckpt` (names not
/// starting with "optimizer."), each assembled from its saved boxes when
/// read, in its saved dtype. Checks every file (size, CRC-32) first, so a
/// damaged checkpoint fails before anything is written from it.
TensorStream checkpoint_stream(const CheckpointInfo& ckpt);

/// @brief `stream` with every tensor cast to `dtype` (layout and values).
TensorStream cast_stream(TensorStream stream, at::ScalarType dtype);

/// @brief How far a reader of a stream has come.
struct StreamProgress {
  int64_t tensors_read = 0, tensors = 0;  ///< read so far, in the layout
  int64_t bytes_read = 0, bytes = 0;      ///< their bytes (layout dtypes)
  double seconds = 0;                     ///< since the stream was wrapped
};

/// @brief `stream` whose reads call `report` after a read when at least
/// `interval_s` seconds passed since the wrapping or the last report (a
/// conversion of a 405B model writes 1.6 TB: minutes to say how far it is).
/// A stream read through in less than `interval_s` reports nothing.
TensorStream with_progress(TensorStream stream, double interval_s,
                           std::function<void(const StreamProgress&)> report);

}  // namespace titan::checkpoint
