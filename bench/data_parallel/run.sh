#!/usr/bin/env bash
# Memory and time per step of the debug model's training under DDP, FSDP and
# HSDP on 1, 2 and 4 emulated ranks, side by side in one run, with the
# communication each rank sends per step measured (CommLog) next to the
# analytic formulas. Ratios are against the 1-rank run of the same table;
# "tok/s/rank" is tokens per second per rank; "job x1rk" the whole job's
# tokens per second (n x tok/s/rank) over the 1-rank run's. Here the ranks
# share one machine's cores, so no speed-up is possible and 1.00 is the
# ideal: what is lost is the cost of the technique (communication, its
# copies, one thread per rank); on one GPU per rank the same ratio is the
# scaling efficiency. "exposed ms" is the time rank 0 was blocked per step
# waiting for FSDP's collectives (0 without FSDP).
# Usage: bench/data_parallel/run.sh [BUILD_DIR] [extra bench_data_parallel flags]
# (4 ranks on a 2-core machine share the cores: step times then say little
# about speed-up, memory and volumes are exact.)
set -euo pipefail
BUILD="${1:-build}"; shift || true
BIN="$BUILD/bin/bench_data_parallel"
run() { "$BIN" --nproc "$2" --mode "$1" "${@:3}" 2>&1 | sed -n 's/^\[rank 0\] RESULT //p; s/^RESULT //p'; }
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

printf '%-5s %5s %-28s %9s %7s %10s %8s %10s %10s %10s %10s %9s %19s %19s %19s\n' mode ranks layout "step ms" "x 1rk" \
  "tok/s/rank" "job x1rk" "exposed ms" "params MiB" "grads MiB" "optim MiB" "mem x1rk" "all-gather MiB" \
  "reduce-scatter MiB" "all-reduce MiB"
printf '%-5s %5s %-28s %9s %7s %10s %8s %10s %10s %10s %10s %9s %19s %19s %19s\n' "" "" "" "" "" "" "" "" "" "" "" "" \
  "meas. / analytic" "meas. / analytic" "meas. / analytic"
for mode in ddp fsdp hsdp; do
  base_ms=""; base_params=""; base_tps=""
  for n in 1 2 4; do
    [ "$mode" = hsdp ] && [ "$n" -ne 4 ] && continue
    [ "$mode" = ddp ] && [ "$n" -eq 1 ] && m=fsdp || m=$mode  # 1 rank: the plain trainer either way
    r=$(run "$m" "$n" "$@")
    [ -n "$r" ] || { echo "bench_data_parallel --nproc $n --mode $mode failed"; exit 1; }
    ms=$(field "$r" step_ms); p=$(field "$r" params_MiB)
    if [ -z "$base_ms" ]; then
      if [ "$n" -eq 1 ]; then base_ms=$ms; base_params=$p; base_tps=$(field "$r" tokens_per_s_per_rank); else
        r1=$(run fsdp 1 "$@"); base_ms=$(field "$r1" step_ms); base_params=$(field "$r1" params_MiB)
        base_tps=$(field "$r1" tokens_per_s_per_rank); fi
    fi
    tps=$(field "$r" tokens_per_s_per_rank)
    printf '%-5s %5s %-28s %9s %7.2f %10s %8.2f %10s %10s %10s %10s %9.2f %9s/%-9s %9s/%-9s %9s/%-9s\n' "$mode" "$n" \
      "$(field "$r" layout)" "$ms" "$(awk "BEGIN{print $ms / $base_ms}")" "$tps" "$(awk "BEGIN{print $n * $tps / $base_tps}")" \
      "$(field "$r" exposed_ms)" "$p" "$(field "$r" grads_MiB)" "$(field "$r" optim_MiB)" \
      "$(awk "BEGIN{print $p / $base_params}")" "$(field "$r" ag_MiB)" "$(field "$r" ag_model_MiB)" \
      "$(field "$r" rs_MiB)" "$(field "$r" rs_model_MiB)" "$(field "$r" ar_MiB)" "$(field "$r" ar_model_MiB)"
  done
done
