#!/usr/bin/env bash
# A rank SIGKILLed in the middle of `titan train` (FSDP over 4 ranks) when
# no titan launcher watches the job: under torchrun, and under a Slurm-style
# environment (SLURM_PROCID / SLURM_NTASKS, rank 0 hosting the store, each
# rank started on its own as srun would). Every surviving rank must exit
# within [comm] timeout_seconds (+ the time to judge heartbeats) with an
# error that names rank 2 as the rank whose heartbeat stopped, and must not
# call a live rank gone.
#   dead_rank.sh PYTHON TITAN SOURCE_DIR torchrun|slurm
set -u
PY=$1
TITAN=$2
SRC=$3
MODE=$4
WORK=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2> /dev/null; rm -rf "$WORK"' EXIT
fail() { echo "FAIL ($MODE): $*"; echo "--- job output"; grep -v "step:" "$WORK"/*.log | tail -60; exit 1; }

ARGS=(train --job.config_file "$SRC/train_configs/debug_model.toml" --job.dump_folder "$WORK/out"
      --training.device cpu --training.seq_len 16 --training.batch_size 4 --training.steps 2000
      --metrics.log_freq 1 --comm.timeout_seconds 10)
# A port nothing uses now, below the kernel's ephemeral range (a port
# there could go to another test's connection before torchrun binds it: its
# agent then cannot host its store, falls back to joining one there and
# waits 60 s).
PORT=$("$PY" "$(dirname "$0")/../support/free_port.py")
# A mark in the job's environment that only this run's ranks carry: under
# `ctest -j`, the torchrun and Slurm runs of this test (and other tests'
# jobs) have titan processes with RANK=2 of their own, which are not ours
# to kill.
export TITAN_DEAD_RANK_RUN="$WORK"
PIDS=()
if [ "$MODE" = torchrun ]; then
  "$PY" -m torch.distributed.run --nnodes=1 --nproc_per_node=4 --rdzv-backend=c10d \
    --rdzv-endpoint="127.0.0.1:$PORT" --no-python "$TITAN" "${ARGS[@]}" > "$WORK/job.log" 2>&1 &
  LAUNCHER=$!
else
  for r in 0 1 2 3; do
    SLURM_PROCID=$r SLURM_NTASKS=4 SLURM_LOCALID=$r SLURM_NTASKS_PER_NODE=4 MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$PORT "$TITAN" "${ARGS[@]}" > "$WORK/rank$r.log" 2>&1 &
    PIDS+=($!)
  done
fi

# Step 3 reached, then rank 2's process (its environment says RANK=2 or
# SLURM_PROCID=2, and carries this run's mark) is killed.
for _ in $(seq 900); do
  grep -q "step: *3 " "$WORK"/*.log 2> /dev/null && break
  sleep 0.1
done
grep -q "step: *3 " "$WORK"/*.log || fail "no step 3 within 90 s"
VICTIM=""
for pid in $(pgrep -f "^$TITAN train"); do
  env_of=$({ tr '\0' '\n' < "/proc/$pid/environ"; } 2> /dev/null) || continue
  echo "$env_of" | grep -qx "TITAN_DEAD_RANK_RUN=$WORK" || continue
  echo "$env_of" | grep -qx "RANK=2\|SLURM_PROCID=2" && VICTIM=$pid
done
[ -n "$VICTIM" ] || fail "rank 2's process not found"
kill -9 "$VICTIM"
KILLED_AT=$(date +%s%N)
echo "killed rank 2 (pid $VICTIM) after step 3"

# The survivors must end on their own, within the collective timeout and
# the heartbeat judgement (a few seconds), not at the test's limit.
if [ "$MODE" = torchrun ]; then
  wait $LAUNCHER
  RC=$?
else
  RC=0
  for r in 0 1 3; do wait "${PIDS[$r]}" || RC=$?; done
fi
ELAPSED_MS=$(( ($(date +%s%N) - KILLED_AT) / 1000000 ))
echo "job ended (exit $RC) $ELAPSED_MS ms after the kill"
[ "$RC" -ne 0 ] || fail "the job exited 0"
[ "$ELAPSED_MS" -lt 40000 ] || fail "the survivors took $ELAPSED_MS ms to stop"

cat "$WORK"/*.log | grep "error:" | sed 's/^/    /'
for r in 0 1 3; do
  # torchrun interleaves the ranks' output ("rank 3: error: ..."); each
  # Slurm-style rank has its own log.
  if [ "$MODE" = torchrun ]; then line=$(grep -E "^rank $r: error:" "$WORK/job.log" | head -1)
  else line=$(grep -E "^error:" "$WORK/rank$r.log" | head -1); fi
  [ -n "$line" ] || fail "rank $r printed no error"
  echo "$line" | grep -q "rank 2 is gone (its heartbeat stopped" || fail "rank $r's error does not say rank 2 is gone: $line"
  echo "$line" | grep -qE "ranks [0-9, ]+ are gone" && fail "rank $r's error calls live ranks gone: $line"
done
echo "PASS ($MODE): every survivor named rank 2 as gone"
