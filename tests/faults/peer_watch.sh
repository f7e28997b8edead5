#!/usr/bin/env bash
# The peer watch under torchrun: rank 2 of 4 stops (SIGSTOP: torchrun sees a
# live process, but its heartbeat stands still, as on a lost host) while the
# other ranks are blocked outside any collective for 120 s — as GPU ranks
# are in a device synchronisation once NCCL has queued the collective, where
# no titan collective can fail and name the stopped rank. With
# TITAN_PEER_WATCH=1 (the default on CUDA) rank 1, which watches rank 2's
# heartbeat, must end the job well before the 120 s sleep ends (its window
# is half the 10 s collective timeout; torchrun then stops the others, the
# stopped rank by SIGKILL after its grace period), with an error that names
# rank 2, and no rank may call a live rank gone.
# MODE failstop: rank 2 first leaves word on the FailureBoard (a rank that
# failed and whose exit then hung), and rank 1's error must quote it.
#   peer_watch.sh PYTHON FAULT_PROGRAM [stop|failstop]
set -u
PY=$1
PROGRAM=$2
MODE=${3:-stop}
WORK=$(mktemp -d)
# This run's ranks carry a mark in their environment, so that the cleanup
# kills them (the stopped one too) and no other test's processes.
export TITAN_PEER_WATCH_RUN="$WORK"
cleanup() {
  kill -9 $(jobs -p) 2> /dev/null
  for pid in $(pgrep -f "^$PROGRAM $MODE"); do
    tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qx "TITAN_PEER_WATCH_RUN=$WORK" && kill -9 "$pid"
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
PORT=$("$PY" "$(dirname "$0")/../support/free_port.py")
START=$(date +%s%N)
TITAN_PEER_WATCH=1 "$PY" -m torch.distributed.run --nnodes=1 --nproc_per_node=4 --rdzv-backend=c10d \
  --rdzv-endpoint="127.0.0.1:$PORT" --no-python "$PROGRAM" "$MODE" 2 10 > "$WORK/job.log" 2>&1 &
LAUNCHER=$!
wait $LAUNCHER
RC=$?
ELAPSED_MS=$(( ($(date +%s%N) - START) / 1000000 ))
fail() { echo "FAIL: $*"; echo "--- job output"; tail -40 "$WORK/job.log"; exit 1; }
grep "error:" "$WORK/job.log" | sed 's/^/    /'
echo "job ended (exit $RC) $ELAPSED_MS ms after it started"
[ "$RC" -ne 0 ] || fail "the job exited 0"
[ "$ELAPSED_MS" -lt 90000 ] || fail "the job took $ELAPSED_MS ms: nobody named the stopped rank before the 120 s sleep ended"
line=$(grep -E "^rank 1: error:" "$WORK/job.log" | head -1)
[ -n "$line" ] || fail "rank 1, which watches rank 2, printed no error"
if [ "$MODE" = stop ]; then
  echo "$line" | grep -q "rank 2 is gone (its heartbeat stood still for" || fail "rank 1's error does not name rank 2: $line"
else
  echo "$line" | grep -q "rank 2 went quiet (its heartbeat stood still for .* s) after rank 2 failed: injected failure, then its exit hung" ||
    fail "rank 1's error does not quote rank 2's own words: $line"
fi
grep -E "error: rank [013] (is gone|went quiet)" "$WORK/job.log" && fail "a live rank was called gone"
echo "PASS: rank 1 named rank 2 ($MODE), $ELAPSED_MS ms after the start"
