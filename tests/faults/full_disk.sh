#!/usr/bin/env bash
# A save that runs out of room: `titan train --nproc 2` resumes from its
# step-4 checkpoint under a file-size limit (`ulimit -f`) smaller than a rank
# file, so the save of step 6 fails in the middle of writing. For the
# synchronous and the async save each:
#   - the job exits non-zero, and every error line names the rank file and
#     says "File too large" (no rank dies of SIGXFSZ, none hangs);
#   - step-4 is still the newest complete checkpoint, and step-6 is not
#     complete;
#   - run again without the limit, the job resumes from step 4 and ends with
#     final rank files byte-identical to a run that never hit the limit.
#   full_disk.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; for f in "$WORK"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }

# min_lr_factor 1 holds the LR constant after warm-up: the schedule does not
# depend on training.steps, so a 4-step run is the first half of an 8-step one.
train() {  # train DUMP STEPS MODE [more args]
  local dump=$1 steps=$2 mode=$3
  shift 3
  timeout 300 "$BIN/titan" train --nproc 2 --job.config_file "$SRC/train_configs/debug_model.toml" \
    --job.dump_folder "$dump" --training.device cpu --training.seq_len 32 --training.batch_size 2 \
    --training.steps "$steps" --metrics.log_freq 1 --lr_scheduler.warmup_steps 2 --lr_scheduler.min_lr_factor 1 \
    --checkpoint.enable_checkpoint --checkpoint.interval 2 --checkpoint.keep_latest_k 0 \
    --checkpoint.async_mode "$mode" --comm.timeout_seconds 30 "$@"
}

train "$WORK/reference" 8 disabled > "$WORK/reference.log" 2>&1 || fail "the reference run failed"

for mode in disabled async; do
  D="$WORK/$mode"
  train "$D" 4 "$mode" > "$WORK/${mode}_first.log" 2>&1 || fail "[$mode] the first run (steps 1-4) failed"
  [ -f "$D/checkpoint/step-4/metadata.json" ] || fail "[$mode] no step-4 checkpoint"
  RANK_FILE_KB=$(( $(stat -c %s "$D/checkpoint/step-4/rank-00000.safetensors") / 1024 ))
  LIMIT_KB=$(( RANK_FILE_KB / 2 ))
  sum_before=$(cat "$D"/checkpoint/step-4/* | cksum)

  # The limit is set in a subshell: it binds titan and the ranks it starts.
  ( ulimit -f "$LIMIT_KB"; train "$D" 8 "$mode" ) > "$WORK/${mode}_limited.log" 2>&1
  RC=$?
  echo "[$mode] under ulimit -f $LIMIT_KB KiB (a rank file is $RANK_FILE_KB KiB): exit $RC"
  grep "error" "$WORK/${mode}_limited.log" | sed 's/^/    /'
  [ "$RC" -ne 0 ] || fail "[$mode] the job exited 0 although its save could not be written"
  [ "$RC" -ne 124 ] || fail "[$mode] the job hung (killed by timeout)"
  grep -q "File size limit exceeded" "$WORK/${mode}_limited.log" && fail "[$mode] a process died of SIGXFSZ"
  n_errors=$(grep -c "error" "$WORK/${mode}_limited.log")
  [ "$n_errors" -ge 1 ] || fail "[$mode] no error line"
  grep "error" "$WORK/${mode}_limited.log" | grep -v "rank-0000[01].safetensors.*File too large" &&
    fail "[$mode] an error line does not name the rank file and 'File too large'"
  [ -f "$D/checkpoint/step-6/metadata.json" ] && fail "[$mode] step-6 looks complete"
  [ "$(cat "$D"/checkpoint/step-4/* | cksum)" = "$sum_before" ] || fail "[$mode] step-4 changed"
  echo "[$mode] step-4 untouched; the folder holds: $(ls "$D/checkpoint" | tr '\n' ' ')"

  train "$D" 8 "$mode" > "$WORK/${mode}_again.log" 2>&1 || fail "[$mode] the run without the limit failed"
  grep -q "checkpoint: resumed from .*step-4 (step 4)" "$WORK/${mode}_again.log" ||
    fail "[$mode] the run without the limit did not resume from step 4"
  for f in "$WORK"/reference/checkpoint/step-8/rank-*.safetensors; do
    cmp -s "$f" "$D/checkpoint/step-8/$(basename "$f")" || fail "[$mode] $(basename "$f") of step 8 differs from the reference"
  done
  echo "[$mode] resumed from step 4; step 8's rank files byte-identical to the uninterrupted run"
done
echo "PASS"
