#!/usr/bin/env bash
# The main job: set up dependencies, build, then
#   1. train the Llama 3 debug model on the built-in corpus with FSDP over 4
#      emulated ranks (4 CPU processes over Gloo; no download; about a minute
#      on 2 idle cores; the loss falls from ~8.1 to ~6) and print the summary;
#      on the first run rank 0 calibrates the CPU GEMM peak for MFU (~1 s,
#      the other ranks wait; cached in ~/.cache/titan/cpu_peak.json, or
#      $TITAN_CPU_PEAK_CACHE; see docs/mfu.md);
#   2. run the collectives emulated on CPU (4 ranks over Gloo on loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "[demo $(date +%H:%M:%S)] $*"; }
say "1/4 setup: Debian packages and the Python environment (the first time: a few minutes, mostly torch's download)"
bash scripts/setup.sh
BUILD="${TITAN_BUILD_DIR:-build}"
say "2/4 configure $BUILD"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
say "3/4 build titan (from empty: about 4 minutes on 2 cores; ninja counts the steps)"
cmake --build "$BUILD" -j "${TITAN_JOBS:-$(nproc)}" --target titan_cli
say "4/4 train the debug model with FSDP over 4 emulated ranks, then the collectives on 4 ranks"
"$BUILD/bin/titan" train --nproc 4 --job.config_file train_configs/debug_model.toml
"$BUILD/bin/titan" collectives --nproc 4
say "done"
