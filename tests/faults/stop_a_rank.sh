#!/usr/bin/env bash
# A rank of `titan train --nproc 4` (FSDP over 4 ranks) is stopped with
# SIGSTOP from outside after step 2. With a 5 s collective timeout the other
# ranks must fail within seconds, each naming the collective they waited in
# and rank 2 as the one that never reached it, and `titan flight-recorder`
# on their dumps must name rank 2 and that collective.
#   stop_a_rank.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; echo "--- job output"; cat "$WORK/job.log"; exit 1; }

"$BIN/titan" train --nproc 4 --job.config_file "$SRC/train_configs/debug_model.toml" \
  --job.dump_folder "$WORK/out" --training.device cpu --training.seq_len 16 --training.batch_size 4 \
  --training.steps 400 --metrics.log_freq 1 --comm.timeout_seconds 5 > "$WORK/job.log" 2>&1 &
LAUNCHER=$!

# Wait for step 2, then find rank 2 among the launcher's children.
for _ in $(seq 600); do
  grep -q "step: *2 " "$WORK/job.log" && break
  kill -0 $LAUNCHER 2> /dev/null || fail "the job ended before step 2"
  sleep 0.1
done
grep -q "step: *2 " "$WORK/job.log" || { kill -9 $LAUNCHER; fail "no step 2 within 60 s"; }
VICTIM=""
children() {  # the launcher's children, from /proc (field 4 of stat is the parent)
  for stat in /proc/[0-9]*/stat; do
    read -r -a f < "$stat" 2> /dev/null || continue
    [ "${f[3]}" = "$LAUNCHER" ] && echo "${f[0]}"
  done
}
for pid in $(children); do
  if tr '\0' '\n' < /proc/$pid/environ | grep -qx "RANK=2"; then VICTIM=$pid; fi
done
[ -n "$VICTIM" ] || { kill -9 $LAUNCHER; fail "rank 2's process not found"; }
kill -STOP "$VICTIM"
STOPPED_AT=$(date +%s%N)
echo "stopped rank 2 (pid $VICTIM) after step 2"

# The launcher ends once the others have failed (it SIGKILLs the stopped
# one after its grace period).
for _ in $(seq 1200); do kill -0 $LAUNCHER 2> /dev/null || break; sleep 0.1; done
if kill -0 $LAUNCHER 2> /dev/null; then kill -9 "$VICTIM" $LAUNCHER; fail "the job still ran 120 s after rank 2 stopped"; fi
wait $LAUNCHER
RC=$?
kill -9 "$VICTIM" 2> /dev/null
ELAPSED_MS=$(( ($(date +%s%N) - STOPPED_AT) / 1000000 ))
echo "job exit $RC, $ELAPSED_MS ms after the stop"
grep "error:" "$WORK/job.log"
[ "$RC" -ne 0 ] || fail "the job exited 0"
for r in 0 1 3; do
  line=$(grep "\[rank $r\] error:" "$WORK/job.log")
  [ -n "$line" ] || fail "rank $r printed no error"
  echo "$line" | grep -q "rank 2 never reported reaching it" || fail "rank $r's error does not name rank 2: $line"
done

echo "--- titan flight-recorder $WORK/out/comm_traces"
"$BIN/titan" flight-recorder "$WORK/out/comm_traces" > "$WORK/fr.txt" 2>&1 || { cat "$WORK/fr.txt"; fail "titan flight-recorder failed"; }
cat "$WORK/fr.txt"
grep -q "traces from ranks 0, 1, 3 of 4; none from rank 2" "$WORK/fr.txt" || fail "the analysis should have traces of 0, 1, 3"
grep -q "^first: group '[a-z_]*' (ranks 0, 1, 2, 3), collective #[0-9]*, step 3: .* never completed on ranks\? [0-9, ]*\( ([^)]*)\)\?; no trace from rank 2" "$WORK/fr.txt" \
  || fail "the analysis does not name the collective ranks 0, 1, 3 waited in"
grep -q "^ranks behind: 2$" "$WORK/fr.txt" || fail "the analysis does not say rank 2 is behind"
echo "PASS"
