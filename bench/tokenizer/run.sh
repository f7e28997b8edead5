#!/usr/bin/env bash
# Side-by-side tokenizer speed: titan's BPE (tiktoken file and tokenizer.json
# forms of one vocabulary) against Python's tiktoken and tokenizers on the
# same text (see bench_tokenizer.py).
#   bench/tokenizer/run.sh [--text FILE] [--rounds 3] [--titan build/bin/titan]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PY="${TITAN_PYTHON:-${TITAN_VENV:-$HOME/.cache/titan/venv}/bin/python}"
[ -x "$PY" ] || PY=python3
exec "$PY" "$here/bench_tokenizer.py" "$@"
