#pragma once
/// @file
/// @brief A Module whose own parameters can be swapped for new tensors.

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "titan/ops/forward_hooks.hpp"

#include <string>

namespace titan::ops {

/// @brief Base of titan's leaf modules (Linear, Embedding, RMSNorm): adds
/// replace_parameter(), which LibTorch's Module lacks.
///
/// Python swaps a parameter by assigning a new nn.Parameter; LibTorch allows
/// neither re-registering a name nor set_data() across backends (meta → CPU),
/// so materialising a meta-built model (to_empty) and, later, replacing full
/// weights by shards need this hook. Subclasses keep convenience members
/// (`weight`) and re-read them in rebind_parameters().
///
/// It is a HookableModule, and the leaf modules run their forward through
/// call_with_hooks(), so that a single leaf can be its own FSDP unit (e.g.
/// `fully_shard(model.tok_embeddings)` with its own mixed-precision policy).
class ParamModule : public HookableModule {
 public:
  /// Replaces this module's own parameter `name` by `value` (keeping its
  /// requires_grad flag) and rebinds the subclass's members. Throws
  /// titan::Error for an unknown name.
  void replace_parameter(const std::string& name, at::Tensor value);

 protected:
  /// Called after a replacement: re-read member handles from named_parameters().
  virtual void rebind_parameters() {}
};

}  // namespace titan::ops
