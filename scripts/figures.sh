#!/usr/bin/env bash
# Regenerates the figures the chapter pages embed (docs/figures/*.svg) from
# the chapter programs themselves, so that a reader on GitHub sees them
# without building. Timelines are measurements of this machine (their shape
# is the schedule's; their proportions depend on the cores and the load).
#   scripts/figures.sh [BIN_DIR]      (default build/bin; about 40 s)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${1:-$root/build/bin}"
OUT="$root/docs/figures"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$OUT"
for p in ch05_pipeline_parallel ch06_flash_attention ch07_async_tensor_parallel ch09_profiling ch11_context_parallel; do
  [ -x "$BIN/$p" ] || { echo "figures: $BIN/$p not built (cmake --build build)" >&2; exit 1; }
done

echo "figures: ch05 pipeline timelines (4 ranks)"
"$BIN/ch05_pipeline_parallel" --nproc 4 --out-dir "$tmp/ch05" >"$tmp/ch05.log" 2>&1
for s in gpipe 1f1b interleaved1f1b zbvzerobubble; do
  cp "$tmp/ch05/$s.svg" "$OUT/ch05_$s.svg"
  cp "$tmp/ch05/${s}_ideal.svg" "$OUT/ch05_${s}_ideal.svg"
done

echo "figures: ch06 flash attention, memory and time against length"
"$BIN/ch06_flash_attention" --svg "$OUT/ch06_flash_memory_time.svg" >"$tmp/ch06.log" 2>&1

echo "figures: ch07 sync vs async TP timeline (2 ranks)"
"$BIN/ch07_async_tensor_parallel" --nproc 2 --svg "$OUT/ch07_async_tp_timeline.svg" >"$tmp/ch07.log" 2>&1

echo "figures: ch11 the causal mask by owner and the ring's steps, contiguous vs head-tail (4 ranks; exact counts)"
"$BIN/ch11_context_parallel" --nproc 4 --seq 4096 --model-seq 256 --reps 1 --svg "$OUT/ch11_causal_split.svg" \
  --ring-svg "$OUT/ch11_ring.svg" >"$tmp/ch11.log" 2>&1

echo "figures: ch09 memory timeline of a profiled step (titan train --nproc 2, FSDP, rank 0)"
for p in titan; do [ -x "$BIN/$p" ] || { echo "figures: $BIN/$p not built" >&2; exit 1; }; done
"$BIN/titan" train --nproc 2 --job.config_file "$root/train_configs/debug_model.toml" --job.dump_folder "$tmp/ch09" \
  --training.steps 4 --profiling.enable_memory_snapshot true --profiling.profile_freq 4 --metrics.log_freq 4 \
  >"$tmp/ch09.log" 2>&1
cp "$tmp/ch09/memory_snapshot/iteration_4/rank0_memory_timeline.svg" "$OUT/ch09_memory_timeline.svg"

echo "figures: ch09 a recorded step drawn from its trace (2 ranks, FSDP, rank 0)"
"$BIN/ch09_profiling" --nproc 2 --trace-svg "$OUT/ch09_trace_step.svg" >"$tmp/ch09_trace.log" 2>&1

ls -la "$OUT"
