#!/usr/bin/env bash
# What a CUDA machine runs in one go, in about 8 minutes at most: the
# prebuilt bundle (scripts/gpu_bundle.sh makes it on the development machine;
# nothing is built here), against this machine's own torch, in order of
# value, every step time-boxed, the rest skipped once the time budget is spent.
#
#   bash scripts/gpu_check.sh [OUT_DIR]          (bundle: gpu_bundle/ beside scripts/)
#   bash gpu_bundle/gpu_check.sh [OUT_DIR]       (the copy inside the bundle)
#
# Writes to OUT_DIR (default $OUT, else /tmp/titan-gpu-check):
# gpu_check_summary.txt (one line per step and its key numbers, written as
# the steps end, so a killed run still leaves what it did),
# gpu_check_full.log (each step's command and the tail of its output) and, at
# the end, gpu_check_artifacts.tgz (every step's whole log and metrics.jsonl)
# and gpu_check_traces.tgz (the capstone's Kineto trace, when under 15 MiB).
# Exit status: 0 every step that ran passed, 1 a step failed or timed out,
# 2 setup failed, 3 all passed but steps were skipped for the time budget.
#
# Environment: TITAN_BUNDLE (the bundle folder), TITAN_PYTHON (a python whose
# torch is the one to run against; default: the first python3 on PATH that
# imports torch), TITAN_GPU_BUDGET_S (seconds after which the remaining steps
# are skipped; default 500: keep it a minute under the caller's own time
# limit, so that the last step's overrun and the archives fit), TITAN_GPU_ONLY (an extended regular expression:
# only the steps whose names match run, e.g. 'capstone|tensor_parallel' for a
# second, shorter visit).
set -uo pipefail
START=$SECONDS
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -n "${TITAN_BUNDLE:-}" ]; then BUNDLE="$(cd "$TITAN_BUNDLE" && pwd)"
elif [ -f "$HERE/MANIFEST" ]; then BUNDLE="$HERE"
else BUNDLE="$(cd "$HERE/.." && pwd)/gpu_bundle"; fi
OUT_DIR="${1:-${OUT:-/tmp/titan-gpu-check}}"
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
SUMMARY="$OUT_DIR/gpu_check_summary.txt"
FULL="$OUT_DIR/gpu_check_full.log"
: >"$SUMMARY"
: >"$FULL"
WORK="$(mktemp -d /tmp/titan-gpu.XXXXXX)"
mkdir -p "$WORK/logs"
BUDGET="${TITAN_GPU_BUDGET_S:-500}"
status=0
skipped=0
# The python steps run with the library path as it was: the bundle's own
# libraries (an older zlib, say) are for titan's binaries, not for python.
ORIG_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"

say() { echo "$*" | tee -a "$SUMMARY"; }
log() { echo "$*" >>"$FULL"; }
# Stops the whole check: the reason on one line in both files and on stdout.
fail_setup() {
  say "gpu_check: FAILED at setup: $*"
  log "gpu_check: FAILED at setup: $*"
  echo "gpu_check: logs in $WORK"
  exit 2
}

say "gpu_check: bundle $BUNDLE, work folder $WORK, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
[ -f "$BUNDLE/MANIFEST" ] && [ -x "$BUNDLE/bin/titan" ] ||
  fail_setup "no bundle at $BUNDLE (make it on the build machine with scripts/gpu_bundle.sh and carry gpu_bundle/)"
sed 's/^/  bundle: /' "$BUNDLE/MANIFEST" | tee -a "$SUMMARY"

# ---------------------------------------------------------------- python, torch
# The python that has torch, used by path: a venv's python reached through a
# symbolic link loses its venv (sys.prefix becomes the base), so no links.
PY=""
for cand in ${TITAN_PYTHON:-} python3 python /opt/torch/.venv/bin/python3; do
  p="$(command -v "$cand" 2>/dev/null)" || continue
  if timeout 60 "$p" -c 'import torch' >/dev/null 2>&1; then PY="$p"; break; fi
done
[ -n "$PY" ] || fail_setup "no python with torch found (tried TITAN_PYTHON, python3, python); set TITAN_PYTHON"
read -r TORCH_DIR TORCH_VERSION TORCH_CUDA PY_PREFIX < <(timeout 60 "$PY" -c \
  'import torch, os, sys; print(os.path.dirname(torch.__file__), torch.__version__, torch.version.cuda, sys.prefix)')
[ -n "${TORCH_DIR:-}" ] || fail_setup "$PY could not report torch's folder"
SITE="$(dirname "$TORCH_DIR")"
# Anything that asks for the venv (TITAN_VENV: CMake's and the tests' python
# lookup) gets the real prefix of this python.
export TITAN_VENV="$PY_PREFIX" TITAN_PYTHON="$PY"
say "python $PY (prefix $PY_PREFIX): torch $TORCH_VERSION, CUDA $TORCH_CUDA"
if ! grep -q "torch $TORCH_VERSION " "$BUNDLE/MANIFEST"; then
  say "WARNING: the bundle was built against $(grep -m1 '^torch' "$BUNDLE/MANIFEST"), this machine has torch $TORCH_VERSION: LibTorch's C++ ABI may differ"
fi

# ---------------------------------------------------------------- libraries
# The bundle's lib first, then torch's own libraries and the nvidia-* wheels
# next to it (CUDA runtime, NVRTC, cuBLAS, cuDNN, NCCL...): what torch loads
# in Python. The binaries' RUNPATH names the build machine's folders, and
# LD_LIBRARY_PATH is searched before RUNPATH.
LIBPATH="$BUNDLE/lib:$TORCH_DIR/lib"
for d in "$SITE"/nvidia/cu13/lib "$SITE"/nvidia/*/lib "$SITE"/nvidia/*/lib64 "$SITE"/cusparselt/lib; do
  [ -d "$d" ] && case ":$LIBPATH:" in *":$d:"*) ;; *) LIBPATH="$LIBPATH:$d" ;; esac
done
export LD_LIBRARY_PATH="$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

# Every bundled binary's libraries must resolve: "not found" (a missing
# library) or "version ... not found" (an older libstdc++) stop here, loudly,
# instead of as twenty cryptic step failures. The bundle's compat/ (the build
# machine's libstdc++) is used only if it cures the latter.
missing_libs() {
  for f in "$BUNDLE/lib/libtitan.so" "$BUNDLE"/bin/*; do
    timeout 30 ldd "$f" 2>&1 | grep "not found" | sed "s|^|$(basename "$f"): |"
  done | sort -u
}
missing="$(missing_libs)"
if [ -n "$missing" ] && [ -d "$BUNDLE/compat" ]; then
  export LD_LIBRARY_PATH="$BUNDLE/compat:$LD_LIBRARY_PATH"
  missing="$(missing_libs)"
  [ -z "$missing" ] && say "ldd: using the bundle's compat/ libstdc++ (this machine's is older)"
fi
if [ -n "$missing" ]; then
  echo "$missing" | head -20 | tee -a "$SUMMARY" >>"$FULL"
  fail_setup "ldd: libraries not found for the bundle (above); LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
fi
say "ldd: every library of $(ls "$BUNDLE/bin" | wc -l) programs and libtitan.so resolves"

# ---------------------------------------------------------------- the GPU
command -v nvidia-smi >/dev/null 2>&1 || fail_setup "nvidia-smi not found: this machine has no NVIDIA driver (is it the GPU machine?)"
if ! smi="$(timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1)"; then
  fail_setup "nvidia-smi failed: $(echo "$smi" | head -1)"
fi
say "gpu: $smi"
# The GPUs this process may use (nvidia-smi -L ignores CUDA_VISIBLE_DEVICES).
GPUS="$(timeout 60 env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" "$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null | tail -1)"
case "$GPUS" in ''|*[!0-9]*) GPUS=1 ;; esac
cuda_ok="$(timeout 120 "$PY" -c 'import torch; print(torch.cuda.is_available() and torch.cuda.get_device_name(0))' 2>&1 | tail -1)"
case "$cuda_ok" in False|""|*Error*) fail_setup "torch sees no CUDA device: $cuda_ok" ;; esac
say "torch.cuda: $cuda_ok"

export TITAN_SOURCE_DIR="$BUNDLE" TITAN_BIN_DIR="$BUNDLE/bin"
# The built-in corpus and its tokenizer come with the bundle (the machine
# may have neither); the cache is a writable copy (titan adds to it).
[ -d "$BUNDLE/data/fortunes" ] || fail_setup "the bundle has no data/fortunes (an older bundle? remake it with scripts/gpu_bundle.sh)"
export TITAN_FORTUNES_DIR="$BUNDLE/data/fortunes" TITAN_CACHE_DIR="$WORK/cache"
mkdir -p "$TITAN_CACHE_DIR"
[ -d "$BUNDLE/data/cache/tokenizers" ] && cp -r "$BUNDLE/data/cache/tokenizers" "$TITAN_CACHE_DIR/"
T="$BUNDLE/bin/titan"
CFG="$BUNDLE/train_configs/debug_model.toml"

# ---------------------------------------------------------------- steps
# step NAME SECONDS PATTERN CMD...: runs CMD in $WORK under `timeout`, whole
# output in $WORK/logs/NAME.log; one PASS/FAIL/TIMEOUT line with its time and
# the output lines matching PATTERN (at most 12) go to the summary, the
# command and the last 40 lines to the full log. Skipped once the budget is spent.
step() {
  local name="$1" secs="$2" pattern="$3"
  shift 3
  if [ -n "${TITAN_GPU_ONLY:-}" ] && ! [[ "$name" =~ $TITAN_GPU_ONLY ]]; then return 0; fi
  local elapsed=$((SECONDS - START))
  if [ "$elapsed" -ge "$BUDGET" ]; then
    say "SKIP    $name (time budget of ${BUDGET}s spent)"
    skipped=1
    return 0
  fi
  # Never past the budget by more than one step's overrun.
  [ $((BUDGET - elapsed)) -lt "$secs" ] && secs=$((BUDGET - elapsed > 20 ? BUDGET - elapsed : 20))
  local logf="$WORK/logs/$name.log" t0=$SECONDS rc
  (cd "$WORK" && timeout -k 10 "$secs" "$@") >"$logf" 2>&1
  rc=$?
  local verdict=PASS
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then verdict=TIMEOUT; status=1
  elif [ "$rc" -ne 0 ]; then verdict="FAIL($rc)"; status=1
  elif [[ "$name" == flash_cuda || "$name" == fused_ops_cuda ]] && grep -q '\[  SKIPPED \]' "$logf"; then
    verdict="FAIL(skipped: no CUDA seen by the test)"; status=1  # GTEST_SKIP exits 0
  elif grep -q 'destroy_process_group() was not called' "$logf"; then
    # torch's warning from a ProcessGroupNCCL destroyed without its
    # shutdown(): dist::shutdown() should have ended every NCCL group.
    verdict="FAIL(an NCCL group ended without its shutdown)"; status=1
  fi
  say "$(printf '%-7s %s (%ds)' "$verdict" "$name" $((SECONDS - t0)))"
  if [ -n "$pattern" ]; then grep -E -- "$pattern" "$logf" | head -12 | sed 's/^/    /' | tee -a "$SUMMARY"; fi
  if [ "$verdict" != PASS ]; then grep -E "FAILED|Failure|rror|what\(\)" "$logf" | head -6 | sed 's/^/    ! /' | tee -a "$SUMMARY"; fi
  { echo "===== $name: $verdict, rc $rc, $((SECONDS - t0)) s: $*"; tail -40 "$logf"; } >>"$FULL"
}
TRAIN=("$T" train --job.config_file "$CFG" --training.device cuda)
PYRUN=(env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" "$PY")
LOSS='tokens/s|loss  |error|Error'

# 1. titan's CUDA flash kernel against math attention (accuracy).
#    (A folder's tests are one executable; --titan-test-files picks a file's.)
step flash_cuda 90 'PASSED|FAILED|SKIPPED' "$BUNDLE/bin/test_attention" --titan-test-files=test_flash_cuda.cpp
#    titan's fused CUDA kernels (SwiGLU, RoPE) and the chunked cross-entropy
#    against the op-by-op versions and float64, on the GPU.
step fused_ops_cuda 60 'PASSED|FAILED|cross|swiglu .*fp32|rope .*fp32|model' env TITAN_TEST_DEVICE=cuda "$BUNDLE/bin/test_ops" \
  --titan-test-files=test_fused_ops.cpp
# 1c. Two ranks on one GPU: Gloo carries the CUDA tensors ([comm] backend =
#     "gloo", send and recv staged through pinned host memory) and both
#     ranks share GPU 0 ([comm] ranks_per_device = 2); titan verify checks
#     each layout against one process on the same GPU (fp32).
for lay in "fsdp2:" "ddp2:--parallelism.data_parallel_replicate_degree 2 --parallelism.data_parallel_shard_degree 1" \
           "tp2:--parallelism.tensor_parallel_degree 2" "pp2:--parallelism.pipeline_parallel_degree 2" \
           "cp2:--parallelism.context_parallel_degree 2"; do
  # shellcheck disable=SC2086 # the layout's overrides are words
  step "two_ranks_gloo_${lay%%:*}" 90 'verify|PASS|FAIL|diverg|error|Error' "$T" verify --nproc 2 \
    --job.config_file "$CFG" --training.device cuda --comm.backend gloo --comm.ranks_per_device 2 ${lay#*:}
done
# 1d. A fake rank at full size ([comm] mode = "fake_backend"): rank 0 of the
#     8B at FSDP 64, sequence 8192, its peak beside titan estimate's.
step fake_rank_8b_fsdp64 120 'fake rank|tensor peak|parameters|step  |error|Error' "$T" train \
  --job.config_file "$BUNDLE/train_configs/llama3_8b.toml" --training.device cuda --comm.mode fake_backend \
  --comm.fake_world_size 64 --comm.fake_rank 0 --training.steps 3 --model.tokenizer_path "" --training.dataset "" \
  --training.seq_len 8192 --training.batch_size 1 --checkpoint.enable_checkpoint false --job.dump_folder "$WORK/fake8b"
# 2. The debug model trained on the GPU with SDPA and with the flash kernel
#    (fp32 model: the kernel casts to bf16 and back, docs/attention.md).
for attn in sdpa flash; do
  step "train_$attn" 60 "$LOSS" "${TRAIN[@]}" --model.attn_type "$attn" --training.steps 20 --metrics.log_freq 5 \
    --job.dump_folder "$WORK/attn_$attn"
done
# 3. The capstone on one GPU (early: it is the measurement this machine is
#    for, and the steps after it are checks a failure would only repeat): an 8B-shaped Llama 3 cut to 4 blocks (1.9B
#    parameters: fp32 weights, gradients and AdamW take 31 GB) in bf16
#    autocast (one device: torchtitan's AMP), batch 1 x 8192 tokens, AC off:
#    tokens/s, MFU against the bf16 peak and peak memory against `titan
#    estimate`; Llama 3 1B likewise; then torchtitan 0.2.2's own model in
#    eager PyTorch on the same 8B-shaped model, batch and sequence (the
#    bundle's torchtitan/, bench/torchtitan_eager/torchtitan_eager.py) and
#    the ratio. Goal: titan >= 1.0x torchtitan eager, MFU >= 45 %.
CAP=(--job.config_file "$CFG" --training.device cuda --training.seq_len 8192 --training.batch_size 1
     --training.mixed_precision_param bfloat16 --activation_checkpoint.mode none --lr_scheduler.warmup_steps 2)
CAP8=("${CAP[@]}" --model.flavor 8B --model.n_layers 4)
step capstone_8b_4blocks 150 'tokens/s|memory|loss  |error|Error' "$T" train "${CAP8[@]}" --training.steps 12 \
  --metrics.log_freq 4 --job.dump_folder "$WORK/cap8b"
# The same run op by op ([model] fused_kernels = false: ATen's SwiGLU and
# RoPE, the one-piece cross-entropy), then the fused one again, so that the
# ratio fused / op-by-op is measured twice around the op-by-op run.
step capstone_8b_unfused 150 'tokens/s|memory|loss  |error|Error' "$T" train "${CAP8[@]}" --model.fused_kernels false \
  --training.steps 12 --metrics.log_freq 4 --job.dump_folder "$WORK/cap8b_unfused"
step capstone_8b_fused_again 150 'tokens/s|memory|loss  |error|Error' "$T" train "${CAP8[@]}" --training.steps 12 \
  --metrics.log_freq 4 --job.dump_folder "$WORK/cap8b_again"
# One profiled step of the same run (a Kineto trace of step 10), to see where
# the step's time goes beside torchtitan's.
step capstone_8b_profile 90 'tokens/s|profiling|error|Error' "$T" train "${CAP8[@]}" --training.steps 10 \
  --metrics.log_freq 5 --profiling.enable_profiling --profiling.profile_freq 10 --job.dump_folder "$WORK/cap8b_profile"
step capstone_8b_estimate 30 'Total estimated|error|Error' "$T" estimate "${CAP8[@]}"
step capstone_1b 120 'tokens/s|memory|loss  |error|Error' "$T" train "${CAP[@]}" --model.flavor 1B --training.steps 12 \
  --metrics.log_freq 4 --job.dump_folder "$WORK/cap1b"
# 3b. Predict, then measure (docs/predict.md): titan predict's step for the
#     capstone runs above on this GPU's preset, beside what they measured;
#     and a run no preset was calibrated on, the 8B-shaped model with full
#     AC (its memory against the estimate's too).
PRESET=h100_sxm
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -qi h200 && PRESET=h200
cat >"$WORK/predict_capstone.sh" <<EOF
for extra in "" "--model.fused_kernels false" "--activation_checkpoint.mode full"; do
  echo "8B-shaped, 4 blocks \$extra:"; "$T" predict ${CAP8[*]} --cluster.preset $PRESET \$extra | tail -1
done
echo "1B:"; "$T" predict ${CAP[*]} --model.flavor 1B --cluster.preset $PRESET | tail -1
EOF
step predict_capstone 30 'predicted|8B|1B|error|Error' bash "$WORK/predict_capstone.sh"
step capstone_8b_full_ac 150 'tokens/s|memory|loss  |error|Error' "$T" train "${CAP8[@]}" \
  --activation_checkpoint.mode full --training.steps 12 --metrics.log_freq 4 --job.dump_folder "$WORK/cap8b_full_ac"
TT_WHEEL="$BUNDLE/torchtitan/torchtitan-0.2.2-py3-none-any.whl"
if [ -f "$TT_WHEEL" ]; then
  step torchtitan_eager_8b_4blocks 150 'torchtitan eager|Error' "${PYRUN[@]}" "$BUNDLE/torchtitan/torchtitan_eager.py" \
    --torchtitan "$TT_WHEEL" --n-layers 4 --seq 8192 --batch 1 --steps 12 --warmup 4
  cat >"$WORK/capstone_ratio.py" <<'EOF_RATIO'
# capstone_ratio.py METRICS_JSONL TORCHTITAN_LOG: titan's median step after
# 4 warm-up steps (its metrics.jsonl) beside torchtitan eager's line.
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
timed = [r for r in recs if r["step"] > 4] or recs
tps = 8192 / statistics.median(r["step_time_s"] for r in timed)
mfu = statistics.median(r["mfu_pct"] for r in timed)
peak = max(r.get("memory", {}).get("max_allocated_bytes", 0) for r in recs)
tt = [json.loads(l[l.index("{"):]) for l in open(sys.argv[2]) if '"torchtitan eager"' in l]
line = f"capstone 8B-shaped, 4 blocks, 1 x 8192 bf16: titan {tps:.0f} tokens/s, MFU {mfu:.1f} %, peak {peak / 2**30:.1f} GiB"
if tt:
    t = tt[-1]
    line += (f"; torchtitan eager {t['tokens_per_s']:.0f} tokens/s, peak {t['peak_bytes'] / 2**30:.1f} GiB; "
             f"ratio titan / torchtitan {tps / t['tokens_per_s']:.3f}")
print(line)
EOF_RATIO
  step capstone_vs_torchtitan 20 'capstone' "${PYRUN[@]}" "$WORK/capstone_ratio.py" "$WORK/cap8b/metrics.jsonl" \
    "$WORK/logs/torchtitan_eager_8b_4blocks.log"
  for run in cap8b_unfused cap8b_again; do
    [ -f "$WORK/$run/metrics.jsonl" ] && step "capstone_$run" 20 'capstone' "${PYRUN[@]}" "$WORK/capstone_ratio.py" \
      "$WORK/$run/metrics.jsonl" "$WORK/logs/torchtitan_eager_8b_4blocks.log"
  done
else
  say "SKIP    torchtitan_eager_8b_4blocks (no torchtitan wheel in the bundle)"
fi

# 4. The flash kernel against SDPA, bf16, causal, head_dim 128 (goal >= 0.6x
#    SDPA fwd+bwd at 4096), with GQA and with documents.
B="$BUNDLE/bin/bench_attention_cuda"
step bench_attention 60 'RESULT|speed|seq' "$B" --seqs 1024,4096 --reps 10
step bench_attention_gqa 45 'RESULT|speed|seq' "$B" --seqs 4096 --heads 32 --kv-heads 8 --reps 10
step bench_attention_docs 45 'RESULT|speed|seq' "$B" --seqs 4096 --doc-len 512 --reps 10
# 5. The multi-process tests as one NCCL rank on the GPU (run directly: the
#    CTest files of the build machine hold its absolute paths).
#    Each entry: the folder's executable and the test file.
for t in dist/collectives dist/device_mesh dtensor/dtensor optim/grad_clip parallel/tensor_parallel \
         parallel/data_parallel parallel/activation_checkpoint parallel/parallel_dims parallel/pipeline; do
  exe="$BUNDLE/bin/test_${t%/*}_ranks"
  [ -x "$exe" ] || { say "SKIP    ${t#*/} ($(basename "$exe") not in the bundle)"; continue; }
  step "${t#*/}_np1_cuda" 45 '\[  (PASSED|FAILED) ' env TITAN_TEST_DEVICE=cuda "$exe" --nproc 1 \
    --titan-test-files="test_${t#*/}.cpp"
done
# 6. Float8 on the tensor cores: tokens/s without, tensorwise, rowwise
#    (at::_scaled_mm with per-row scales needs sm_90 and cuBLAS >= 12.9).
F8='parallel|float8|tokens/s|loss  |error|Error'
step float8_off 45 "$F8" "${TRAIN[@]}" --training.steps 30 --metrics.log_freq 10 --job.dump_folder "$WORK/float8_off"
step float8_tensorwise 45 "$F8" "${TRAIN[@]}" --float8.enable_float8_linear --training.steps 30 --metrics.log_freq 10 \
  --job.dump_folder "$WORK/float8_tensorwise"
step float8_rowwise 45 "$F8" "${TRAIN[@]}" --float8.enable_float8_linear --float8.recipe_name rowwise --training.steps 30 \
  --metrics.log_freq 10 --job.dump_folder "$WORK/float8_rowwise"
# Emulated float8 GEMMs ([float8] emulate: the CPU's arithmetic on the GPU,
# for GPUs below sm_89): the loss beside float8_tensorwise's (same casts,
# fp32 instead of the tensor cores' accumulation).
step float8_emulated 45 "$F8" "${TRAIN[@]}" --float8.enable_float8_linear --float8.emulate --training.steps 30 \
  --metrics.log_freq 10 --job.dump_folder "$WORK/float8_emulated"
if [ "${GPUS:-1}" -ge 2 ]; then
  # The float8 FSDP all-gather needs one GPU per rank: losses must be equal.
  for ag in false true; do
    step "float8_allgather_$ag" 60 'parallel|loss  ' "$T" train --nproc 2 --job.config_file "$CFG" \
      --training.device cuda --float8.enable_float8_linear --float8.enable_fsdp_float8_all_gather=$ag \
      --float8.precompute_float8_dynamic_scale_for_fsdp=$ag --training.steps 10 --metrics.log_freq 5 \
      --job.dump_folder "$WORK/float8_ag_$ag"
  done
fi
# Pure bf16 ([training] dtype = "bfloat16"): weights, gradients and AdamW
# state in bf16 on the GPU (the fused AdamW, the gradient norm and the flash
# kernel take the bf16 weights as they are); its loss beside float8_off's.
step train_pure_bf16 45 "$LOSS" "${TRAIN[@]}" --training.dtype bfloat16 --model.attn_type flash --training.steps 30 \
  --metrics.log_freq 10 --job.dump_folder "$WORK/pure_bf16"
# 7. An async_with_pinned_mem checkpoint and the resume from it; a CUDA
#    Kineto trace and the allocator's memory snapshot (docs/checkpoint.md,
#    docs/profiling.md).
step checkpoint_async_profile 60 'checkpoint|profil|memory|error|Error' "${TRAIN[@]}" --metrics.log_freq 5 \
  --training.steps 10 --checkpoint.enable_checkpoint --checkpoint.interval 5 \
  --checkpoint.async_mode async_with_pinned_mem --profiling.enable_profiling --profiling.profile_freq 5 \
  --profiling.enable_memory_snapshot --job.dump_folder "$WORK/ckpt"
step checkpoint_resume 45 'resum|training done|loss  |error|Error' "${TRAIN[@]}" --metrics.log_freq 5 --training.steps 12 \
  --checkpoint.enable_checkpoint --checkpoint.interval 5 --job.dump_folder "$WORK/ckpt"
step profile_files 10 'trace|snapshot|timeline' \
  bash -c "ls -la '$WORK/ckpt/profile_trace/iteration_5' '$WORK/ckpt/memory_snapshot/iteration_5'"
# 7b. The optimizer step inside backward ([optimizer] early_step_in_backward)
#    on the GPU: its hooks run on autograd's device thread. With clipping off
#    it must train exactly as the step after backward (docs/optim.md): the
#    two runs' losses side by side, and the memory left after backward.
for sib in false true; do
  step "step_in_backward_$sib" 45 "$LOSS" "${TRAIN[@]}" --training.steps 10 --metrics.log_freq 1 --training.max_norm 0 \
    --optimizer.early_step_in_backward "$sib" --job.dump_folder "$WORK/sib_$sib"
done
cat >"$WORK/sib_compare.py" <<'EOF_SIB'
# sib_compare.py A B: the losses of two metrics.jsonl, step by step.
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if l.strip()] for p in sys.argv[1:3])
same = a == b
worst = max((abs(x - y) / abs(y) for x, y in zip(a, b)), default=0.0)
print(f"step in backward on CUDA: {len(b)} losses {'identical' if same else 'DIFFER'} to the step after backward "
      f"(max rel. diff {worst:.3g})")
sys.exit(0 if same and len(a) == len(b) > 0 else 1)
EOF_SIB
step step_in_backward_compare 20 'step in backward' "${PYRUN[@]}" "$WORK/sib_compare.py" \
  "$WORK/sib_false/metrics.jsonl" "$WORK/sib_true/metrics.jsonl"
# 8. titan estimate against CUDA's allocator: the memory timeline's peak
#    beside the estimate, for batch 8 x 1024 so that activations dominate.
cat >"$WORK/estimate_vs_cuda.sh" <<EOF_ESTIMATE
# estimate_vs_cuda.sh AC TIMELINE_JSON TITAN_ARGS...: the estimate's total
# beside the measured peak of a run's CUDA memory timeline.
ac="\$1" timeline="\$2"
shift 2
est="\$("$T" estimate "\$@" | grep "Total estimated")" || { echo "titan estimate printed no total"; exit 1; }
env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" "$PY" - "\$timeline" "\$ac" "\$est" <<'EOF_PY'
import json, sys
m = json.load(open(sys.argv[1]))
print("estimate vs CUDA, AC", sys.argv[2] + ": measured peak", max(x["peak_in_phase"] for x in m), "bytes;", sys.argv[3])
EOF_PY
EOF_ESTIMATE
for ac in none full; do
  E=(--job.config_file "$CFG" --training.batch_size 8 --training.seq_len 1024 --activation_checkpoint.mode "$ac")
  step "estimate_run_ac_$ac" 60 'error|Error' "$T" train "${E[@]}" --training.device cuda --training.steps 2 \
    --profiling.enable_memory_snapshot --profiling.profile_freq 2 --job.dump_folder "$WORK/estimate_$ac"
  step "estimate_vs_cuda_ac_$ac" 30 'estimate vs CUDA' bash "$WORK/estimate_vs_cuda.sh" "$ac" \
    "$WORK/estimate_$ac/memory_snapshot/iteration_2/rank0_memory_timeline.json" "${E[@]}"
done

# What the machine keeps goes back in two archives (each file under the
# carry-back limits): the whole logs and every run's metrics, and the traces.
(cd "$WORK" && timeout 60 tar -czf "$OUT_DIR/gpu_check_artifacts.tgz" logs $(ls -d */metrics.jsonl 2>/dev/null)) ||
  say "gpu_check: could not archive the logs"
if [ -d "$WORK/cap8b_profile/profile_trace" ]; then
  (cd "$WORK" && timeout 60 tar -czf "$OUT_DIR/gpu_check_traces.tgz" cap8b_profile/profile_trace)
  if [ "$(stat -c %s "$OUT_DIR/gpu_check_traces.tgz" 2>/dev/null || echo 0)" -gt $((15 << 20)) ]; then
    rm -f "$OUT_DIR/gpu_check_traces.tgz"
    say "gpu_check: the capstone's trace is over 15 MiB compressed: left in $WORK"
  fi
fi
[ "$status" -eq 0 ] && [ "$skipped" -eq 1 ] && status=3
say "gpu_check: status $status after $((SECONDS - START)) s (whole logs and dumps: $WORK)"
exit $status
