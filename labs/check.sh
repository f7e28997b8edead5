#!/usr/bin/env bash
# labs/check.sh NN [--solution] [checker args...]
#
# Builds lab NN's checker from YOUR code (labs/NN_*/starter/) and runs it on
# the lab's number of emulated ranks. It prints every check as PASS or FAIL
# with the numbers it saw, then "lab NN: k of n checks failed" and the
# TODO(lab) holes of the starter (file:line) to look at; it exits non-zero
# while any check fails.
#
# --solution checks the lab's reference solution (labs/NN_*/solution/) the
# same way: it must pass.
#
# The build folder is ./build (or $TITAN_BUILD_DIR); configure it once with
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
set -euo pipefail

usage="usage: labs/check.sh NN [--solution] [checker args...]   (e.g. labs/check.sh 01)"
if [[ $# -lt 1 || ! "$1" =~ ^[0-9]+$ ]]; then
  echo "$usage" >&2
  exit 2
fi
nn=$(printf '%02d' "$((10#$1))")
shift
variant=starter
target_suffix=check
if [[ "${1:-}" == "--solution" ]]; then
  variant=solution
  target_suffix=check_solution
  shift
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TITAN_BUILD_DIR:-$root/build}

lab_dir=$(ls -d "$root"/labs/"$nn"_*/ 2>/dev/null | head -1 || true)
if [[ -z "$lab_dir" ]]; then
  echo "error: there is no lab $nn under $root/labs" >&2
  exit 2
fi
lab_dir=${lab_dir%/}
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  echo "error: no build folder at $build; configure it first:" >&2
  echo "  cmake -S $root -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release" >&2
  exit 2
fi
# A build folder configured from another checkout would build THAT tree's
# starter and silently ignore the edits made here.
configured_from=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
if [[ -n "$configured_from" && "$(cd "$configured_from" 2>/dev/null && pwd -P)" != "$(cd "$root" && pwd -P)" ]]; then
  echo "error: $build was configured from $configured_from, not from $root: it would check that tree's code;" >&2
  echo "  use a build folder of this tree: cmake -S $root -B $root/build -G Ninja -DCMAKE_BUILD_TYPE=Release" >&2
  echo "  (or point TITAN_BUILD_DIR at one)" >&2
  exit 2
fi

echo "== building lab${nn}_${target_suffix} from the ${variant} code"
if ! cmake --build "$build" --target "lab${nn}_${target_suffix}" -- -j"${TITAN_JOBS:-2}"; then
  echo "error: the lab $nn ${variant} code does not compile (see the compiler output above)" >&2
  exit 1
fi
nproc=$(cat "$build/labs/lab${nn}.nproc")
echo "== running lab${nn}_${target_suffix} on $nproc emulated ranks"

# The checker's own lines, without the launcher's report of a rank that
# exited non-zero (a failed check, not a crash: the summary below says so).
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
"$build/bin/lab${nn}_${target_suffix}" --nproc "$nproc" "$@" 2>&1 | tee "$log" |
  grep -v -E '^titan run: rank [0-9]+ failed with exit status 1'
status=${PIPESTATUS[0]}
set -e
passed=$(grep -c '\[PASS\]' "$log" || true)
failed=$(grep -c '\[FAIL\]' "$log" || true)
total=$((passed + failed))
if [[ $status -eq 0 ]]; then
  echo "lab $nn (${variant}): all $total checks passed"
  exit 0
fi
if [[ $failed -eq 0 ]]; then
  # No check reported a failure: the checker itself stopped (a crash, an
  # exception, a hang cut off by the timeout). Its output above says where.
  echo "lab $nn (${variant}): the checker stopped with status $status after $total checks (see above)" >&2
  exit "$status"
fi
echo "lab $nn (${variant}): $failed of $total checks failed"
if [[ $variant == solution ]]; then
  echo "the reference solution fails its own checks: a bug in the lab, please report it" >&2
else
  echo "where to look: the TODO(lab) holes of your code"
  (cd "$root" && grep -rn 'TODO(lab):' "${lab_dir#"$root"/}/starter" |
    sed -E 's/^([^:]+:[0-9]+):[[:space:]]*/  \1  /' | cut -c1-150)
fi
exit 1
