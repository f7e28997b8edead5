#!/usr/bin/env bash
# Collective bandwidth on Gloo with 2 and 4 emulated ranks, side by side.
# Usage: bench/collectives/run.sh [BUILD_DIR] [extra Google Benchmark flags]
set -euo pipefail
BUILD="${1:-build}"; shift || true
for n in 2 4; do
  "$BUILD/bin/bench_collectives" --nproc "$n" --benchmark_counters_tabular=true "$@" 2>&1 | sed -n 's/^\[rank 0\] //p'
done
