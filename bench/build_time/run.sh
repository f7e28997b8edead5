#!/usr/bin/env bash
# How long a newcomer waits for `titan`: the build of the titan_cli target
# (libtitan.so with its CUDA sources where LibTorch has CUDA, and the CLI)
# from an empty build folder with ccache off, once per variant, side by side
# in one run:
#   unity     libtitan's sources compiled in batches (TITAN_UNITY_BUILD=ON,
#             the default): the torch inline code each source instantiates
#             and optimises is compiled once per batch instead of once per file
#   per-file  every source on its own (TITAN_UNITY_BUILD=OFF)
# Prints wall seconds for the configure and the build, and the ratio.
#
# --tests times the test executables (test_*), after libtitan is built
# untimed in the same folder. Its variants:
#   tests       the default: the tests of a folder linked into one
#               executable (TITAN_TEST_GROUPS=ON) and compiled as one
#               source (TITAN_TEST_UNITY_BUILD=ON), the tests' own code at
#               -O1 (TITAN_TEST_OPT)
#   tests-O3    one executable per titan_add_test and one object per test
#               source, at -O3 (the build before all three)
#
# --rest times what `scripts/test.sh` adds once `bash scripts/demo.sh` has
# built titan: everything else (tests, chapters, labs, benches, the
# sanitizer and libFuzzer builds), after titan_cli is built untimed in the
# same folder. Variant `all` (the default flags).
#
#   bench/build_time/run.sh [--jobs N] [--target T] [--variants "unity per-file"] [--batch 8]
#   bench/build_time/run.sh --tests [--jobs N]
#   bench/build_time/run.sh --rest [--jobs N]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
JOBS=$(nproc)
TARGET=titan_cli
VARIANTS="unity per-file"
BATCH=8
TESTS=0
REST=0
while (($#)); do
  case "$1" in
    --tests) TESTS=1; VARIANTS="tests tests-O3"; shift ;;
    --rest) REST=1; VARIANTS="all"; shift ;;
    --jobs) JOBS=$2; shift 2 ;;
    --target) TARGET=$2; shift 2 ;;
    --variants) VARIANTS=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    *) echo "usage: bench/build_time/run.sh [--tests | --rest] [--jobs N] [--target T] [--variants \"unity per-file\"] [--batch N]" >&2
       exit 2 ;;
  esac
done

now() { date +%s.%N; }
declare -A build_s
what="$TARGET from an empty folder"
((TESTS)) && what="every test_* executable, libtitan built first (untimed)"
((REST)) && what="everything after titan_cli (what scripts/test.sh adds to scripts/demo.sh), titan_cli built first (untimed)"
echo "build of $what, ccache off, -j $JOBS, $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
printf '%-10s %12s %10s %8s\n' variant configure_s build_s objects
for v in $VARIANTS; do
  flags=()
  case "$v" in
    unity) flags=(-DTITAN_UNITY_BUILD=ON) ;;
    per-file) flags=(-DTITAN_UNITY_BUILD=OFF) ;;
    tests) flags=(-DTITAN_TEST_GROUPS=ON -DTITAN_TEST_UNITY_BUILD=ON -DTITAN_TEST_OPT=-O1) ;;
    tests-O3) flags=(-DTITAN_TEST_GROUPS=OFF -DTITAN_TEST_UNITY_BUILD=OFF -DTITAN_TEST_OPT=-O3) ;;
    all) flags=() ;;
    *) echo "unknown variant $v (unity, per-file, tests, tests-O3, all)" >&2; exit 2 ;;
  esac
  dir=$(mktemp -d "${TMPDIR:-/tmp}/titan-build-time.XXXXXX")
  t0=$(now)
  # CCACHE_PROGRAM set to not-found: no compiler launcher at all.
  cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCCACHE_PROGRAM=CCACHE_PROGRAM-NOTFOUND \
    "${flags[@]}" -DTITAN_UNITY_BATCH="$BATCH" >"$dir.configure.log" 2>&1 \
    || { echo "configure failed: $dir.configure.log" >&2; exit 1; }
  tc=$(now)
  targets=("$TARGET")
  if ((TESTS)); then
    cmake --build "$dir" -j "$JOBS" --target titan >"$dir.prebuild.log" 2>&1 \
      || { echo "build of titan failed: $dir.prebuild.log" >&2; exit 1; }
    mapfile -t targets < <(ninja -C "$dir" -t targets all | sed -n 's/^\(test_[A-Za-z0-9_]*\): phony$/\1/p' | sort -u)
  fi
  if ((REST)); then
    cmake --build "$dir" -j "$JOBS" --target titan_cli >"$dir.prebuild.log" 2>&1 \
      || { echo "build of titan_cli failed: $dir.prebuild.log" >&2; exit 1; }
    targets=(all)
  fi
  t1=$(now)
  cmake --build "$dir" -j "$JOBS" --target "${targets[@]}" >"$dir.build.log" 2>&1 \
    || { echo "build failed: $dir.build.log" >&2; exit 1; }
  t2=$(now)
  objects=$(grep -c "Building" "$dir.build.log" || true)
  build_s[$v]=$(python3 -c "print(f'{$t2 - $t1:.0f}')")
  printf '%-10s %12.0f %10s %8s\n' "$v" "$(python3 -c "print($tc - $t0)")" "${build_s[$v]}" "$objects"
  rm -rf "$dir" "$dir.configure.log" "$dir.prebuild.log" "$dir.build.log"
done
if [[ -n "${build_s[unity]:-}" && -n "${build_s[per-file]:-}" ]]; then
  python3 -c "print(f'per-file / unity: {${build_s[per-file]} / ${build_s[unity]}:.2f}x')"
fi
if [[ -n "${build_s[tests]:-}" && -n "${build_s[tests-O3]:-}" ]]; then
  python3 -c "print(f'tests-O3 / tests: {${build_s[tests-O3]} / ${build_s[tests]}:.2f}x')"
fi
