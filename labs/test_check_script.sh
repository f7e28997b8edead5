#!/usr/bin/env bash
# The lab_check_script test: labs/check.sh as a learner runs it.
#   labs/test_check_script.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1 build=$2
fail() { echo "FAIL: $*"; exit 1; }

out=$(TITAN_BUILD_DIR=$build bash "$src/labs/check.sh" 06 2>&1); rc=$?
echo "$out" | tail -5
[[ $rc -eq 1 ]] || fail "the untouched starter of lab 06 exited $rc, not 1"
grep -Eq '^lab 06 \(starter\): [0-9]+ of [0-9]+ checks failed$' <<<"$out" || fail "no 'k of n checks failed' line"
grep -Eq '^  labs/06_flash_attention/starter/merge\.cpp:[0-9]+  // TODO\(lab\):' <<<"$out" || fail "no TODO(lab) hole named"

out=$(TITAN_BUILD_DIR=$build bash "$src/labs/check.sh" 06 --solution 2>&1); rc=$?
echo "$out" | tail -1
[[ $rc -eq 0 ]] || fail "the solution of lab 06 exited $rc"
grep -Eq '^lab 06 \(solution\): all [0-9]+ checks passed$' <<<"$out" || fail "no 'all checks passed' line"

foreign=$(mktemp -d)
trap 'rm -rf "$foreign"' EXIT
echo "CMAKE_HOME_DIRECTORY:INTERNAL=$foreign" >"$foreign/CMakeCache.txt"
out=$(TITAN_BUILD_DIR=$foreign bash "$src/labs/check.sh" 06 2>&1); rc=$?
echo "$out" | head -1
[[ $rc -eq 2 ]] || fail "a build folder of another tree was not refused (exit $rc)"
grep -q "was configured from $foreign, not from" <<<"$out" || fail "the refusal does not name the other tree"
echo "OK: check.sh reports failures with the holes, checks the solution, refuses another tree's build"
