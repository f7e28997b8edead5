#!/usr/bin/env bash
# labs/check.sh NN [checker args...]
#
# Builds lab NN's checker from YOUR code (labs/NN_*/starter/) and runs it on
# the lab's number of emulated ranks. It prints every check as PASS or FAIL
# with the numbers it saw, and exits non-zero while any check fails.
#
# The build folder is ./build (or $TITAN_BUILD_DIR); configure it once with
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
set -euo pipefail

if [[ $# -lt 1 || ! "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: labs/check.sh NN [checker args...]   (e.g. labs/check.sh 01)" >&2
  exit 2
fi
nn=$(printf '%02d' "$((10#$1))")
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TITAN_BUILD_DIR:-$root/build}

if ! ls -d "$root"/labs/"$nn"_*/ >/dev/null 2>&1; then
  echo "error: there is no lab $nn under $root/labs" >&2
  exit 2
fi
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  echo "error: no build folder at $build; configure it first:" >&2
  echo "  cmake -S $root -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release" >&2
  exit 2
fi

echo "== building lab${nn}_check from your starter code"
if ! cmake --build "$build" --target "lab${nn}_check" -- -j"${TITAN_JOBS:-2}"; then
  echo "error: your lab $nn code does not compile (see the compiler output above)" >&2
  exit 1
fi
nproc=$(cat "$build/labs/lab${nn}.nproc")
echo "== running lab${nn}_check on $nproc emulated ranks"
exec "$build/bin/lab${nn}_check" --nproc "$nproc" "$@"
