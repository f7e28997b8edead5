#!/usr/bin/env bash
# Runs libfuzzer_readers on every reader: each starts from its seeds (the
# valid inputs the targets write) with the format's tokens as libFuzzer's
# dictionary, for RUNS inputs, and the table says what the inputs did and
# how much of the readers' code they reached (libFuzzer's cov: edges, ft:
# features). Exits 1 at the first reader that crashes, hangs, trips a
# sanitizer or breaks the one-line rule; libFuzzer keeps that input
# (crash-*, timeout-*) in the work folder and the log names it.
#
#   run.sh PROGRAM [RUNS=5000] [SEED=1] [WORK=a temp folder]
set -euo pipefail
PROG=$(realpath "${1:?usage: run.sh PROGRAM [RUNS] [SEED] [WORK]}")
RUNS=${2:-5000}
SEED=${3:-1}
WORK=${4:-}
if [ -z "$WORK" ]; then  # a folder of its own, removed unless something was found
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/titan-libfuzzer-run.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$WORK"
# AddressSanitizer's options are the program's own (__asan_default_options).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

printf '%-20s %7s %9s %8s %8s %6s %6s %6s %8s\n' reader inputs accepted refused located cov ft corpus seconds
for target in $("$PROG" --list); do
  corpus="$WORK/$target"
  rm -rf "$corpus"
  "$PROG" --target="$target" --write-corpus="$corpus"
  log="$WORK/$target.log"
  start=$(date +%s%N)
  # -timeout: an input past 10 s is a hang; -rss_limit_mb: a reader taking
  # its memory size from the input would pass it; -max_len: 8 KB covers the
  # largest seed (the debug job's TOML).
  if ! (cd "$WORK" && "$PROG" --target="$target" -runs="$RUNS" -seed="$SEED" -timeout=10 -rss_limit_mb=4096 \
        -max_len=8192 -dict="$corpus.dict" "$corpus" >"$log" 2>&1); then
    trap - EXIT  # keep the log and the input libFuzzer saved
    echo "FAILED: $target (log: $log)"
    grep -E "ERROR|libfuzzer_readers:|SUMMARY|Test unit written|crash-|timeout-" "$log" | head -20
    exit 1
  fi
  ms=$((($(date +%s%N) - start) / 1000000))
  done_line=$(grep -E "DONE" "$log" | tail -1)
  cov=$(sed -E 's/.*cov: ([0-9]+).*/\1/' <<<"$done_line")
  ft=$(sed -E 's/.*ft: ([0-9]+).*/\1/' <<<"$done_line")
  corp=$(sed -E 's/.*corp: ([0-9]+).*/\1/' <<<"$done_line")
  read -r inputs accepted refused located < <(sed -nE \
    's/.*: ([0-9]+) inputs, ([0-9]+) accepted, ([0-9]+) refused, ([0-9]+) located/\1 \2 \3 \4/p' "$log")
  printf '%-20s %7s %9s %8s %8s %6s %6s %6s %4d.%d\n' "$target" "$inputs" "$accepted" "$refused" "$located" \
    "$cov" "$ft" "$corp" $((ms / 1000)) $((ms % 1000 / 100))
done
echo "0 findings ($RUNS inputs per reader, seed $SEED)"
