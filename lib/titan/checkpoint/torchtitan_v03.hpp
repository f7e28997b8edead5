#pragma once
/// @file
/// @brief Llama 3 state dicts between titan's names (torchtitan 0.2's:
/// `output.weight`, `attention.wq/wk/wv`) and torchtitan 0.3's
/// (`lm_head.weight`, `attention.qkv_linear.wq/wk/wv`, and the fused
/// `attention.qkv_linear.wqkv` of its FusedQKVLinear).
///
/// The fused layout, read off torchtitan 0.3.0's
/// models/common/attention.py (FusedQKVLinear, _merge_qkv_on_load /
/// _split_qkv_on_save): not a plain concatenation but grouped by KV head.
/// With hpk = n_heads / n_kv_heads query heads per KV head, r = hpk + 2 and
/// head_dim d, wqkv is [n_kv·r·d, dim] = cat([wq as [n_kv, hpk, d, dim],
/// wk as [n_kv, 1, d, dim], wv as [n_kv, 1, d, dim]], dim 1), flattened:
/// each KV group's query heads, then its key head, then its value head.
/// torchtitan 0.3's own state_dict() splits wqkv back into
/// qkv_linear.wq/wk/wv on save, so its checkpoints hold the split names;
/// wqkv appears only in a dump of the module's parameters.

#include "titan/checkpoint/tensor_stream.hpp"
#include "titan/models/llama3/state_dict_adapter.hpp"
#include "titan/models/llama3/model_args.hpp"

namespace titan::checkpoint {

using models::llama3::StateDict;

/// @brief The fused [n_kv·(hpk+2)·d, dim] wqkv of `wq` [n_heads·d, dim],
/// `wk` and `wv` [n_kv·d, dim], in torchtitan 0.3's grouped layout.
at::Tensor fuse_qkv(const at::Tensor& wq, const at::Tensor& wk, const at::Tensor& wv, int64_t n_heads,
                    int64_t n_kv_heads);

/// @brief The inverse of fuse_qkv: {wq, wk, wv}. Throws titan::Error when
/// the shape does not fit the head counts.
std::vector<at::Tensor> split_qkv(const at::Tensor& wqkv, int64_t n_heads, int64_t n_kv_heads);

/// @brief True when the names are torchtitan 0.3's (an `lm_head.weight`
/// or a `qkv_linear` tensor), false for titan's own.
bool has_torchtitan_v03_names(const StateDict& state);

/// @brief titan state dict (checked against `args`) → torchtitan 0.3
/// names: `lm_head.weight` (also written when tied: 0.3's state_dict()
/// lists both names of its shared parameter), and per layer either
/// `qkv_linear.wq/wk/wv` (what 0.3's checkpoints hold) or, with
/// `fused`, one `qkv_linear.wqkv`.
StateDict to_torchtitan_v03(const StateDict& titan_state, const models::llama3::ModelArgs& args, bool fused);

/// @brief torchtitan 0.3 names → titan's: the exact inverse of
/// to_torchtitan_v03 for either form (split or fused, even mixed per
/// layer). Tied args drop `lm_head.weight` after checking it equals the
/// embedding. A name outside the map, a layer with only some of its q/k/v,
/// or a shape that does not fit is a one-line titan::Error; the result is
/// checked against `args`.
StateDict from_torchtitan_v03(const StateDict& v03_state, const models::llama3::ModelArgs& args);

/// @brief to_torchtitan_v03 on a stream: the names and shapes are checked
/// and renamed at once (on the layout), each value made when it is read
/// (a fused wqkv from its layer's three projections).
TensorStream to_torchtitan_v03(const TensorStream& titan_state, const models::llama3::ModelArgs& args, bool fused);

/// @brief from_torchtitan_v03 on a stream: the same checks on the layout
/// before any value is read; each value made when read (a wq, wk or wv cut
/// from its fused wqkv); with tied args the embedding's read also reads
/// `lm_head.weight` and checks the two are equal.
TensorStream from_torchtitan_v03(const TensorStream& v03_state, const models::llama3::ModelArgs& args);

}  // namespace titan::checkpoint
