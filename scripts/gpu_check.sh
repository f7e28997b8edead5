#!/usr/bin/env bash
# What a GPU machine runs in one go (a few minutes): build against that
# machine's own torch (no network there), then run NCCL world-size-1
# collectives and the CUDA twins of the CPU tests.
#
#   bash scripts/gpu_check.sh [OUT_DIR]
#
# Uses the python3 on PATH that has torch (override with TITAN_PYTHON), so no
# venv or download is needed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-${OUT:-/tmp/titan-gpu-check}}"
mkdir -p "$OUT"
PY="${TITAN_PYTHON:-python3}"
VENV_DIR="$(mktemp -d)"
mkdir -p "$VENV_DIR/bin"
ln -sf "$(command -v "$PY")" "$VENV_DIR/bin/python3"
export TITAN_VENV="$VENV_DIR"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))" | tee -a "$OUT/gpu.txt"

BUILD=build-gpu
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTITAN_WITH_CUDA=ON -DTITAN_BUILD_BENCH=OFF \
  > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build "$BUILD" -j "$(nproc)" > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }

status=0
# The multi-process tests on the GPU: one GPU, so world size 1 over NCCL.
cd "$BUILD"
TITAN_TEST_DEVICE=cuda ctest -R "_np1$" --output-on-failure 2>&1 | tee "$OUT/ctest_cuda_np1.log" || status=1
# Everything else, as on CPU.
ctest -E "_np[0-9]+$" --output-on-failure 2>&1 | tee "$OUT/ctest_rest.log" || status=1
# titan's CUDA flash kernel: against SDPA side by side (bf16, causal, the
# 8B model's head_dim; goal >= 0.6x SDPA fwd+bwd at 4096), with documents,
# and the debug model trained with it beside SDPA (docs/attention.md). Its
# accuracy test (test_flash_cuda) ran in the ctest above.
"$BUILD/bin/bench_attention_cuda" 2>&1 | tee "$OUT/bench_attention_cuda.log" || status=1
"$BUILD/bin/bench_attention_cuda" --seqs 4096 --heads 32 --kv-heads 8 2>&1 | tee -a "$OUT/bench_attention_cuda.log" || status=1
"$BUILD/bin/bench_attention_cuda" --seqs 4096 --doc-len 512 2>&1 | tee -a "$OUT/bench_attention_cuda.log" || status=1
for attn in sdpa flash; do
  "$BUILD/bin/titan" train --job.config_file train_configs/debug_model.toml --training.device cuda \
    --model.attn_type $attn --training.steps 20 --metrics.log_freq 5 \
    --job.dump_folder "$OUT/attn_$attn" 2>&1 | tee "$OUT/attn_$attn.log" | grep -E "tokens/s|loss  " || status=1
done
# Float8 on the GPU's tensor cores: a few debug-model steps with and
# without it, tokens/s side by side (docs/float8.md).
cd ..
for f8 in false true; do
  "$BUILD/bin/titan" train --job.config_file train_configs/debug_model.toml --training.device cuda \
    --float8.enable_float8_linear=$f8 --training.steps 30 --metrics.log_freq 10 \
    --job.dump_folder "$OUT/float8_$f8" 2>&1 | tee "$OUT/float8_$f8.log" | grep -E "parallel|tokens/s|loss  " || status=1
done
# The rowwise recipe on the GPU: at::_scaled_mm with per-row scales (fp32
# output needs sm_90 and cuBLAS >= 12.9; the CPU emulates it), losses next
# to the tensorwise run above (docs/float8.md).
"$BUILD/bin/titan" train --job.config_file train_configs/debug_model.toml --training.device cuda \
  --float8.enable_float8_linear --float8.recipe_name rowwise --training.steps 30 --metrics.log_freq 10 \
  --job.dump_folder "$OUT/float8_rowwise" 2>&1 | tee "$OUT/float8_rowwise.log" | grep -E "parallel|tokens/s|loss  " || status=1
# The float8 FSDP all-gather needs one GPU per rank (NCCL): with two or
# more, two ranks with and without it; the losses must be equal.
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  for ag in false true; do
    "$BUILD/bin/titan" train --nproc 2 --job.config_file train_configs/debug_model.toml --training.device cuda \
      --float8.enable_float8_linear --float8.enable_fsdp_float8_all_gather=$ag \
      --float8.precompute_float8_dynamic_scale_for_fsdp=$ag --training.steps 10 --metrics.log_freq 5 \
      --job.dump_folder "$OUT/float8_ag_$ag" 2>&1 | tee "$OUT/float8_ag_$ag.log" | grep -E "parallel|loss  " || status=1
  done
fi
# Checkpoints on the GPU: an async_with_pinned_mem save (page-locked host
# buffers, device-to-host copies) and the resume from it; profiling: a CUDA
# Kineto trace and the allocator snapshot for memory_viz (docs/checkpoint.md,
# docs/profiling.md).
T="$BUILD/bin/titan train --job.config_file train_configs/debug_model.toml --training.device cuda --metrics.log_freq 5"
$T --training.steps 10 --checkpoint.enable_checkpoint --checkpoint.interval 5 \
  --checkpoint.async_mode async_with_pinned_mem --profiling.enable_profiling --profiling.profile_freq 5 \
  --profiling.enable_memory_snapshot --job.dump_folder "$OUT/ckpt" 2>&1 | tee "$OUT/ckpt.log" | grep -E "checkpoint|profiling|memory" || status=1
$T --training.steps 12 --checkpoint.enable_checkpoint --checkpoint.interval 5 \
  --job.dump_folder "$OUT/ckpt" 2>&1 | tee "$OUT/ckpt_resume.log" | grep -E "resumed|training done" || status=1
ls -la "$OUT/ckpt/profile_trace/iteration_5" "$OUT/ckpt/memory_snapshot/iteration_5" 2>&1 | tee -a "$OUT/ckpt.log"
# titan estimate against CUDA's allocator (docs/estimate.md): the memory
# timeline's peak (CUDA "allocated" counters) beside the estimate, for a
# wider model than the debug one so that activations dominate.
for ac in none full; do
  E="--job.config_file train_configs/debug_model.toml --training.batch_size 8 --training.seq_len 1024 --activation_checkpoint.mode $ac"
  "$BUILD/bin/titan" train $E --training.device cuda --training.steps 2 --profiling.enable_memory_snapshot \
    --profiling.profile_freq 2 --job.dump_folder "$OUT/estimate_$ac" > "$OUT/estimate_$ac.log" 2>&1 || status=1
  est=$("$BUILD/bin/titan" estimate $E | grep "Total estimated")
  python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print('estimate vs CUDA, AC $ac: measured peak', max(x['peak_in_phase'] for x in m), 'bytes;', sys.argv[2])" \
    "$OUT/estimate_$ac/memory_snapshot/iteration_2/rank0_memory_timeline.json" "$est" | tee -a "$OUT/estimate.log" || status=1
done
echo "gpu_check: status $status"
exit $status
