#!/usr/bin/env bash
# TP, SP + TP and async TP on the debug model on 2 and 4 emulated ranks, side
# by side: median step time, exposed (blocked) TP communication, and bytes
# per rank per step measured against the analytic formula.
# Usage: bench/tensor_parallel/run.sh [BUILD_DIR] [extra flags]
# (2 cores shared by all ranks: times are a shape, the bytes are exact.)
set -euo pipefail
BUILD="${1:-build}"; shift || true
for n in 2 4; do
  "$BUILD/bin/bench_tensor_parallel" --nproc "$n" "$@" 2>&1 | sed -n 's/^\[rank 0\] //p' | grep -v '^RESULT'
  echo
done
