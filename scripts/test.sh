#!/usr/bin/env bash
# The test command: set up dependencies, configure (Release, Ninja), build
# everything, run the CTest suite. Extra arguments go to ctest (e.g. -L slow,
# -R dtensor). TITAN_BUILD_DIR picks the build folder (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD="${TITAN_BUILD_DIR:-build}"
JOBS="${TITAN_JOBS:-$(nproc)}"
say() { echo "[test $(date +%H:%M:%S)] $*"; }
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
say "building everything: the library, the CLI, the tests, chapters, labs and benches (ninja counts the steps)"
cmake --build "$BUILD" -j "$JOBS"
say "running the CTest suite"
cd "$BUILD"
# One test per core, at most 4 (the multi-rank tests start up to 16
# processes each; TITAN_TEST_JOBS sets it): a test that needs the machine to
# itself says so with CTest's PROCESSORS, and the longest ones carry a COST
# so that a fresh build folder starts them first.
CORES=$(nproc)
ctest --output-on-failure --timeout 600 -j "${TITAN_TEST_JOBS:-$((CORES < 4 ? CORES : 4))}" "$@"
