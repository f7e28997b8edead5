#!/usr/bin/env bash
# Builds, here, what scripts/gpu_check.sh runs on a CUDA machine, and
# collects it into one folder small enough to carry there (gpu_bundle/,
# git-ignored): no compiler, CMake, GTest, toml++ or nlohmann-json headers
# are needed on the GPU machine, and no minute of its time goes on building.
#
#   bash scripts/gpu_bundle.sh [BUNDLE_DIR]      (default: gpu_bundle/)
#
# Environment: TITAN_BUILD (the build folder; default build/, reused when it
# is already CUDA-enabled, else build-cuda/ is configured with
# TITAN_WITH_CUDA=ON), JOBS (parallel compile jobs; default 2),
# TITAN_CUDA_ARCHITECTURES (passed to a folder it configures: e.g. 80-real,
# a bundle without sm_90 code, to see an H100/H200 run ATen's ops instead
# and say so; use its own TITAN_BUILD folder).
#
# The bundle:
#   bin/      titan, bench_attention_cuda and the test executables of the
#             tests gpu_check.sh runs (stripped): test_attention (flash_cuda),
#             test_ops (fused_ops) and the folders whose tests run as one
#             NCCL rank
#   lib/      libtitan.so (stripped) and libtomlplusplus.so.3 (a system
#             package here, maybe absent there)
#   compat/   this machine's libstdc++ and libgcc_s, which gpu_check.sh puts
#             on the library path only when ldd says the GPU machine's are too old
#   torchtitan/ torchtitan 0.2.2's wheel (PyPI, ~0.5 MB) and
#             bench/torchtitan_eager/torchtitan_eager.py, the reference of
#             gpu_check.sh's step 3 (the GPU machine has no network)
#   data/     the built-in corpus (Debian's fortunes, 2.8 MB) and the
#             tokenizer titan trained from it here: `titan train` on the
#             debug config reads them, and the GPU machine has neither
#   train_configs/, gpu_check.sh, MANIFEST (versions it was built against)
# Everything else (LibTorch, CUDA runtime, NCCL, cuDNN) comes from the GPU
# machine's own torch wheel, which must be the same torch version (MANIFEST).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUNDLE="${1:-$ROOT/gpu_bundle}"
case "$BUNDLE" in /*) ;; *) BUNDLE="$PWD/$BUNDLE" ;; esac
JOBS="${JOBS:-2}"
# The test executables gpu_check.sh runs with --nproc 1 on the GPU (NCCL,
# world size 1): the folders of the tests registered with NPROCS 1
# (tests/*/CMakeLists.txt; a folder's DIST tests are test_<folder>_ranks).
NP1_TESTS=(test_dist_ranks test_dtensor_ranks test_optim_ranks test_parallel_ranks)
PROGRAMS=(titan test_attention test_ops bench_attention_cuda "${NP1_TESTS[@]}")
TARGETS=(titan titan_cli test_attention test_ops bench_attention_cuda "${NP1_TESTS[@]}")
MAX_MB=48  # the device carries 64 MiB in all, the working tree included

die() { echo "gpu_bundle: $*" >&2; exit 1; }

# A build folder whose configure found CUDA: the CUDA-only targets exist.
cuda_enabled() { [ -f "$1/build.ninja" ] && grep -q "bench_attention_cuda" "$1/build.ninja"; }

BUILD="${TITAN_BUILD:-$ROOT/build}"
if ! cuda_enabled "$BUILD"; then
  if [ -z "${TITAN_BUILD:-}" ] && [ -f "$BUILD/CMakeCache.txt" ]; then
    # build/ exists without CUDA (configured with TITAN_WITH_CUDA=OFF, say):
    # leave it alone and use a CUDA folder beside it.
    BUILD="$ROOT/build-cuda"
  fi
  echo "gpu_bundle: configuring $BUILD with TITAN_WITH_CUDA=ON"
  ARCHS=()
  [ -z "${TITAN_CUDA_ARCHITECTURES:-}" ] || ARCHS=("-DTITAN_CUDA_ARCHITECTURES=$TITAN_CUDA_ARCHITECTURES")
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTITAN_WITH_CUDA=ON "${ARCHS[@]}" \
    >"$BUILD.configure.log" 2>&1 ||
    { tail -30 "$BUILD.configure.log"; die "configure failed (log: $BUILD.configure.log)"; }
  cuda_enabled "$BUILD" || die "$BUILD configured but has no CUDA targets (nvcc or the CUDA torch wheel missing?)"
fi
echo "gpu_bundle: building ${#TARGETS[@]} targets in $BUILD (-j $JOBS)"
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib" "$BUNDLE/compat"
for p in "${PROGRAMS[@]}"; do
  [ -x "$BUILD/bin/$p" ] || die "$BUILD/bin/$p was not built"
  cp "$BUILD/bin/$p" "$BUNDLE/bin/$p"
  strip --strip-unneeded "$BUNDLE/bin/$p"
done
cp "$BUILD/lib/libtitan.so" "$BUNDLE/lib/libtitan.so"
strip --strip-unneeded "$BUNDLE/lib/libtitan.so"

# Libraries that are neither glibc's nor the torch wheel's: the ones ldd
# resolves outside the venv. libtomlplusplus.so.3 is the known one; any other
# that appears (a new dependency) is bundled too rather than found missing there.
PY="$(grep -m1 '^TITAN_PYTHON:' "$BUILD/CMakeCache.txt" | cut -d= -f2-)"
[ -n "$PY" ] && [ -x "$PY" ] || PY="$HOME/.cache/titan/venv/bin/python3"
SITE="$("$PY" -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
is_glibc() {
  case "$(basename "$1")" in
    libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*|libresolv.so.*|libutil.so.*) return 0 ;;
  esac
  return 1
}
for f in "$BUNDLE/lib/libtitan.so" "$BUNDLE/bin/"*; do
  ldd "$f" | awk '/=> \// {print $3}'
done | sort -u | while read -r dep; do
  # The CUDA toolkit's own (libnvrtc, libcudart... found here under
  # /usr/local/cuda) come there from the torch wheel's nvidia/cu13/lib.
  case "$dep" in "$SITE"/*|"$BUILD"/*|/usr/local/cuda*) continue ;; esac
  case "$(basename "$dep")" in libcu*|libnv*|libnccl*|libc10*|libtorch*) continue ;; esac
  is_glibc "$dep" && continue
  name="$(basename "$dep")"
  case "$name" in
    libstdc++.so.*|libgcc_s.so.*) cp -L "$dep" "$BUNDLE/compat/$name" ;;
    *) cp -L "$dep" "$BUNDLE/lib/$name" ;;
  esac
done
[ -f "$BUNDLE/lib/libtomlplusplus.so.3" ] || die "libtomlplusplus.so.3 was not found among libtitan.so's dependencies"

# The binaries' RUNPATH names this machine's build folder and venv; RUNPATH
# (not the older RPATH) is searched after LD_LIBRARY_PATH, so gpu_check.sh's
# library path wins there. Say so if a linker ever wrote RPATH instead.
if readelf -d "$BUNDLE/bin/titan" | grep '(RPATH)' >/dev/null; then
  echo "gpu_bundle: warning: bin/titan has DT_RPATH (searched before LD_LIBRARY_PATH); paths of this machine may shadow the bundle's" >&2
fi

cp -r "$ROOT/train_configs" "$BUNDLE/train_configs"
cp "$ROOT/scripts/gpu_check.sh" "$BUNDLE/gpu_check.sh"
# The built-in corpus and its trained tokenizer (titan_cache_dir()'s
# tokenizers/), which gpu_check.sh points TITAN_FORTUNES_DIR and
# TITAN_CACHE_DIR at.
CORPUS="${TITAN_FORTUNES_DIR:-/usr/share/games/fortunes}"
[ -d "$CORPUS" ] || die "the built-in corpus is not at $CORPUS (scripts/setup.sh installs Debian's fortunes)"
mkdir -p "$BUNDLE/data/cache"
cp -r "$CORPUS" "$BUNDLE/data/fortunes"
TOK_CACHE="${TITAN_CACHE_DIR:-$HOME/.cache/titan}/tokenizers"
[ -d "$TOK_CACHE" ] && cp -r "$TOK_CACHE" "$BUNDLE/data/cache/tokenizers"
# torchtitan's own model, for step 3's eager reference: its wheel, fetched
# here once (TITAN_CACHE_DIR) since the GPU machine has no network; a
# missing wheel only skips that comparison there.
mkdir -p "$BUNDLE/torchtitan"
cp "$ROOT/bench/torchtitan_eager/torchtitan_eager.py" "$BUNDLE/torchtitan/"
TT_CACHE="${TITAN_CACHE_DIR:-$HOME/.cache/titan}/wheels"
TT_WHEEL="$TT_CACHE/torchtitan-0.2.2-py3-none-any.whl"
if [ ! -f "$TT_WHEEL" ]; then
  mkdir -p "$TT_CACHE"
  "$PY" -m pip download --quiet --no-deps --dest "$TT_CACHE" torchtitan==0.2.2 ||
    echo "gpu_bundle: warning: could not download torchtitan 0.2.2; step 3 will measure titan alone" >&2
fi
[ -f "$TT_WHEEL" ] && cp "$TT_WHEEL" "$BUNDLE/torchtitan/"
{
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) from $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  echo "glibc $(ldd --version | head -1 | awk '{print $NF}')"
  nccl_h="$(grep -m1 '^TITAN_NCCL_INCLUDE:' "$BUILD/CMakeCache.txt" | cut -d= -f2-)/nccl.h"
  [ -f "$nccl_h" ] && echo "nccl.h $(awk '/define NCCL_MAJOR/{a=$3}/define NCCL_MINOR/{b=$3}/define NCCL_PATCH/{c=$3}END{print a"."b"."c}' "$nccl_h") ($nccl_h)"
} >"$BUNDLE/MANIFEST"

size_kb="$(du -sk "$BUNDLE" | cut -f1)"
echo "gpu_bundle: $BUNDLE: $((size_kb / 1024)) MiB"
du -sh "$BUNDLE"/bin/* "$BUNDLE"/lib/* "$BUNDLE"/compat/* 2>/dev/null | sort -h | tail -6
[ "$size_kb" -le $((MAX_MB * 1024)) ] || die "the bundle is $((size_kb / 1024)) MiB, over the $MAX_MB MiB it may take of the device's 64"
cat "$BUNDLE/MANIFEST"
echo "gpu_bundle: done. On the GPU machine: bash gpu_bundle/gpu_check.sh [OUT_DIR] (README.md, 'On a GPU')"
