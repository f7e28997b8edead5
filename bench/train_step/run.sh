#!/usr/bin/env bash
# Side-by-side training-step benchmark: `titan train` vs the Python reference
# model in eager PyTorch (see bench_train_step.py for what is measured).
#   bench/train_step/run.sh [--steps 30] [--threads 2] [--titan build/bin/titan] ...
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PY="${TITAN_PYTHON:-${TITAN_VENV:-$HOME/.cache/titan/venv}/bin/python}"
[ -x "$PY" ] || PY=python3
exec "$PY" "$here/bench_train_step.py" "$@"
