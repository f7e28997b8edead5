#!/usr/bin/env bash
# Every pipeline schedule on 2 and 4 emulated ranks (pp = ranks) at m = 4,
# 8, 16 micro-batches on the debug model's shape (8 layers), side by side:
# median step time and its ratio to GPipe's, the bubble measured from the
# ranks' timelines next to simulate()'s and the closed form, and the
# simulated peak of micro-batches in flight.
# Usage: bench/pipeline/run.sh [BUILD_DIR] [extra flags]
# (2 cores shared by all ranks: times and measured bubbles are a shape, the
# simulated and analytic columns are exact.)
set -euo pipefail
BUILD="${1:-build}"; shift || true
for n in 2 4; do
  "$BUILD/bin/bench_pipeline" --nproc "$n" "$@" 2>&1 | sed -n 's/^\[rank 0\] //p' | grep -v '^RESULT'
  echo
done
