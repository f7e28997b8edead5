#!/usr/bin/env bash
# A machine without the CUDA toolkit (a learner's laptop): titan configures,
# builds and trains there. PyPI's torch is a CUDA build that runs without the
# toolkit, but LibTorch's CMake config stops without one; titan's CMake then
# takes the wheel's CPU libraries itself (cmake/FindTorchFromVenv.cmake).
#
# The toolkit is hidden in a private mount namespace (unshare -m, as root or
# in a user namespace): an empty tmpfs over /usr/local when the tools the
# build needs do not live there (a CUDA install spreads over /usr/local:
# cuda-X.Y, and on some images bin/nvcc, include/cuda_runtime.h, lib/libcudart),
# else over each /usr/local/cuda* and /opt/cuda folder with every nvcc on PATH
# covered by an empty file; CUDA_HOME, CUDA_PATH, LIBRARY_PATH and the toolkit's
# PATH entries are dropped. Then, in BUILD_DIR (kept between runs: ninja
# rebuilds only what changed):
#   configure (it must say "CUDA sources OFF"), build `titan`, check that it
#   links no CUDA library, and train the debug model for 3 steps on 2 ranks.
#
# usage: no_cuda_toolkit.sh SOURCE_DIR BUILD_DIR VENV_PYTHON
# exit 77 (CTest: skipped) where no private mount namespace can be made.
set -euo pipefail
SRC="$1" BLD="$2" PY="$3"

if [ "${TITAN_IN_PRIVATE_MOUNTS:-}" != 1 ]; then
  for how in "-m" "-r -m"; do
    # shellcheck disable=SC2086
    if unshare $how --propagation private true 2>/dev/null; then
      exec env TITAN_IN_PRIVATE_MOUNTS=1 unshare $how --propagation private bash "$0" "$@"
    fi
  done
  echo "SKIPPED: no private mount namespace (unshare -m needs root or user namespaces)"
  exit 77
fi

fail() { echo "FAIL: $*"; exit 1; }

# Where the build's own tools live: a tmpfs over /usr/local must not hide them.
tools_in_usr_local=""
for t in "$PY" "$(command -v cmake)" "$(command -v ninja)" "$(command -v c++)" "$(command -v ccache || true)"; do
  [ -n "$t" ] || continue
  case "$(readlink -f "$t")" in /usr/local/*) tools_in_usr_local="$tools_in_usr_local $t" ;; esac
done
if [ -z "$tools_in_usr_local" ] && [ -d /usr/local ]; then
  mount -t tmpfs titan-no-cuda /usr/local
  echo "hidden: /usr/local (an empty tmpfs)"
else
  echo "the build's tools live under /usr/local ($tools_in_usr_local): hiding the toolkit's folders only"
  for d in /usr/local/cuda /usr/local/cuda-* /opt/cuda; do
    [ -d "$d" ] || continue
    real=$(readlink -f "$d")
    mountpoint -q "$real" || { mount -t tmpfs titan-no-cuda "$real"; echo "hidden: $real"; }
  done
fi
blank=$(mktemp)
chmod 644 "$blank"
while nvcc_path=$(command -v nvcc); do
  mount --bind "$blank" "$(readlink -f "$nvcc_path")"
  echo "hidden: $nvcc_path"
  hash -r
  command -v nvcc >/dev/null && [ -x "$(command -v nvcc)" ] || break
done
unset CUDA_HOME CUDA_PATH CUDA_ROOT CUDAToolkit_ROOT CUDACXX LIBRARY_PATH
PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -i '/cuda' | paste -sd: -)
export PATH
hash -r
if command -v nvcc >/dev/null 2>&1 && [ -x "$(command -v nvcc)" ]; then fail "nvcc is still on PATH: $(command -v nvcc)"; fi
for f in /usr/local/cuda/include/cuda_runtime.h /usr/local/include/cuda_runtime.h; do
  [ ! -e "$f" ] || fail "$f is still visible"
done
echo "no CUDA toolkit in sight: no nvcc on PATH, no /usr/local/cuda"

echo "== configure $BLD"
mkdir -p "$BLD"
cmake -S "$SRC" -B "$BLD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTITAN_BUILD_TESTS=OFF -DTITAN_BUILD_BENCH=OFF \
  -DTITAN_PYTHON="$PY" > "$BLD/configure.log" 2>&1 || { tail -30 "$BLD/configure.log"; fail "configure failed"; }
grep -E "^-- titan: " "$BLD/configure.log"
grep -q "titan: CUDA sources OFF" "$BLD/configure.log" || fail "configure did not say 'CUDA sources OFF'"

echo "== build titan"
cmake --build "$BLD" --target titan_cli > "$BLD/build.log" 2>&1 || { tail -40 "$BLD/build.log"; fail "the build failed"; }
tail -1 "$BLD/build.log"
# What titan itself links (libtorch_cpu brings the wheel's libcudart and
# libcupti along, as it does for any CPU program: they come from PyPI).
if readelf -d "$BLD/bin/titan" "$BLD/lib/libtitan.so" | grep NEEDED | grep -E "libtorch_cuda|libc10_cuda|libcudart|libnccl"; then
  fail "titan links CUDA libraries in a build without the toolkit"
fi
echo "titan links LibTorch's CPU libraries alone: $(readelf -d "$BLD/lib/libtitan.so" | grep -o 'lib\(torch\|c10\)[a-z_]*\.so' | sort -u | tr '\n' ' ')"

echo "== train the debug model, 2 ranks, 3 steps"
run=$(mktemp -d)
out="$run/train.log"
if ! (cd "$run" && "$BLD/bin/titan" train --nproc 2 --job.config_file "$SRC/train_configs/debug_model.toml" \
        --training.steps 3 --job.dump_folder "$run/outputs" > "$out" 2>&1); then
  tail -20 "$out"; fail "training failed"
fi
grep -E "step: +3 +loss" "$out" || { tail -20 "$out"; fail "no step 3 in the training log"; }
rm -rf "$run"
echo "OK: configured, built and trained without the CUDA toolkit"
