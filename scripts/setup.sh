#!/usr/bin/env bash
# Installs everything titan.cpp needs on a fresh Debian machine. Idempotent: each
# step checks first and skips what is already there.
#
#   TITAN_VENV    virtual environment for torch and the Python references
#                 (default: $HOME/.cache/titan/venv, outside the checkout so
#                 clones and CI reuse it)
#
# Pinned: torch==2.11.0 (ships LibTorch: headers, libs, CMake config) and the
# Python packages that tests use as independent references.
set -euo pipefail

VENV="${TITAN_VENV:-$HOME/.cache/titan/venv}"
say() { echo "[setup] $*"; }

# --- Debian packages --------------------------------------------------------
# libgloo-dev: only for gloo's headers, which ProcessGroupGloo.hpp needs to
# compile (gloo's code itself lives inside libtorch_cpu; we never link libgloo).
# fortunes: the English text of the built-in demo corpus.
# zlib1g-dev: CRC-32 of checkpoint files.
# clang: its libFuzzer, for the coverage-guided fuzzer of the readers
# (tests/fuzz/libfuzzer; the project itself builds with g++).
# libdnnl-dev: oneDNN, the GEMM of titan's fp32 Linear layers on the CPU
# (lib/titan/ops/gemm; LibTorch's own copy keeps its symbols hidden).
DEB_PACKAGES=(cmake ninja-build g++ git python3 python3-venv
  libgtest-dev libgmock-dev libbenchmark-dev libtomlplusplus-dev
  nlohmann-json3-dev libgloo-dev doxygen ccache fortunes zlib1g-dev clang libdnnl-dev)
missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
else
  say "Debian packages: all present"
fi

# --- Python virtual environment with torch ----------------------------------
PY_PACKAGES=(torch==2.11.0 numpy==2.4.6 tiktoken==0.14.0 safetensors==0.8.0
  tensorboard==2.21.0 transformers==5.24.0 tokenizers==0.23.3)
PYTHON="${TITAN_PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating virtual environment $VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON" -m venv "$VENV"
fi
need=()
for spec in "${PY_PACKAGES[@]}"; do
  name="${spec%%==*}"; want="${spec##*==}"
  have=$("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('$name'))" 2>/dev/null || true)
  [ "${have%%+*}" = "$want" ] || need+=("$spec")
done
if ((${#need[@]})); then
  say "installing Python packages: ${need[*]}"
  # torch's CUDA wheel and its nvidia-* wheels are the bulk (about 4 GB once
  # installed); pip's lines name each file it downloads with its size.
  case " ${need[*]}" in *" torch=="*) say "torch brings its CUDA libraries: about 4 GB once installed" ;; esac
  "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off "${need[@]}" \
    | { grep -E --line-buffered "^ *(Collecting|Downloading|Successfully installed)" || true; }
else
  say "Python packages: all present ($VENV)"
fi
# torchtitan's own model code, without its dependencies (datasets, tyro,
# torchdata...): bench/torchtitan_eager imports only the model and stubs the
# rest, as on a GPU machine without network (a test checks that it runs).
TORCHTITAN=0.2.2
have=$("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('torchtitan'))" 2>/dev/null || true)
if [ "$have" != "$TORCHTITAN" ]; then
  say "installing torchtitan==$TORCHTITAN (no dependencies)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps "torchtitan==$TORCHTITAN"
fi
say "done"
