#!/usr/bin/env bash
# The main job: set up dependencies, build, and run the demo emulated on CPU
# (4 ranks over Gloo on loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD="${TITAN_BUILD_DIR:-build}"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j "${TITAN_JOBS:-$(nproc)}" --target titan_cli
"$BUILD/bin/titan" collectives --nproc 4
