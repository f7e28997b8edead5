// Lab 10 checker: your FLOP counts (block_flops.cpp) against the FLOPs a
// profiler trace shows for a real forward + backward of one titan
// TransformerBlock — every aten::mm / addmm / bmm's 2·M·K·N from its input
// shapes, and the flash-attention kernels' shapes
// (titan::profiling::count_trace_flops) — for three shapes: multi-head,
// grouped-query (2 kv heads) and an ffn_dim_multiplier width.
//   matmul:    block_matmul_flops equals the trace's matmul FLOPs (1e-9)
//   attention: block_attention_flops equals the kernels' model FLOPs (1e-9)
//
//   labs/check.sh 10           (builds lab10_check from starter/ and runs it)
//   build/bin/lab10_check --nproc 1
#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "block_flops.hpp"
#include "lab_check.hpp"
#include "titan/util/files.hpp"
#include "titan/dist/world.hpp"
#include "titan/launch/program.hpp"
#include "titan/metrics/format.hpp"
#include "titan/models/llama3/transformer_block.hpp"
#include "titan/ops/rope.hpp"
#include "titan/profiling/trace_flops.hpp"
#include "titan/profiling/trace_profiler.hpp"
#include "titan/util/strprintf.hpp"

using namespace titan;

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int, char**) {
    dist::init_distributed({.device = "cpu"});
    struct Shape {
      const char* name;
      int64_t dim, heads, kv_heads;
      std::optional<double> ffn_multiplier;
    };
    const std::vector<Shape> shapes = {{"multi-head (dim 64, 4 heads)", 64, 4, 4, std::nullopt},
                                       {"grouped-query (dim 128, 8 heads, 2 kv)", 128, 8, 2, std::nullopt},
                                       {"ffn_dim_multiplier 1.3 (dim 96, 6 heads)", 96, 6, 3, 1.3}};
    const int64_t batch = 2, seq = 48;
    double worst_mm = 0, worst_att = 0;
    std::string mm_detail, att_detail;
    const std::string dir = files::temp_dir() + "/titan_lab10";
    for (size_t k = 0; k < shapes.size(); ++k) {
      const Shape& s = shapes[k];
      models::llama3::ModelArgs a = models::llama3::flavor_args("debugmodel");
      a.dim = s.dim, a.n_heads = s.heads, a.n_kv_heads = s.kv_heads, a.ffn_dim_multiplier = s.ffn_multiplier;
      a.max_seq_len = seq;
      models::llama3::TransformerBlock block(0, a, at::TensorOptions().dtype(at::kFloat));
      block->init_weights();
      const ops::RopeTable rope = ops::make_rope_table(s.dim / s.heads, seq, a.rope_theta, a.rope_scaling, at::kCPU);
      at::Tensor x = lab::seeded(10 + k, {batch, seq, s.dim}).requires_grad_(true);
      files::remove_all(dir);
      {
        profiling::TraceProfiler profiler({1, 0, 1}, dir, 0, /*cuda=*/false);
        profiler.step_begin(1);
        block->forward(x, rope.cos, rope.sin).sum().backward();
        profiler.step_end(1);
      }
      const profiling::TraceFlops counted = profiling::count_trace_flops(dir + "/iteration_1/rank0_trace.json");
      const double mm = lab10::block_matmul_flops(a, batch * seq);
      const double att = lab10::block_attention_flops(a, batch, seq);
      const double e_mm = std::abs(mm - counted.matmul) / counted.matmul;
      const double e_att = std::abs(att - counted.attention) / counted.attention;
      if (e_mm > worst_mm || mm_detail.empty())
        mm_detail = titan::strprintf("%s: yours %.6g, the trace's %d matmuls %.6g", s.name, mm, counted.matmul_ops,
                                       counted.matmul);
      if (e_att > worst_att || att_detail.empty())
        att_detail = titan::strprintf("%s: yours %.6g, the kernels' %.6g", s.name, att, counted.attention);
      worst_mm = std::max(worst_mm, e_mm);
      worst_att = std::max(worst_att, e_att);
    }
    files::remove_all(dir);
    lab::report(worst_mm < 1e-9, "matmul", titan::strprintf("worst relative error %.3g; %s", worst_mm, mm_detail.c_str()));
    lab::report(worst_att < 1e-9, "attention",
                titan::strprintf("worst relative error %.3g; %s", worst_att, att_detail.c_str()));
    return lab::finish();
  });
}
