#!/usr/bin/env bash
# Activation checkpointing modes none / full / selective every 2nd block /
# selective every block (= full, a sanity check) side by side in one
# process, on torchtitan's debugmodel and a wider model (dim 512, 8 layers,
# 8 heads), batch 8 x 256 tokens: activation memory held after the forward
# and peak over forward + backward, median forward and step time as ratios
# to no AC, and the step-time ratio the recompute should cost in FLOPs.
# Usage: bench/activation_checkpoint/run.sh [BUILD_DIR] [extra flags]
# (rounds of one step each, so that the modes interleave finely; about 5
# minutes on 2 shared cores under load; the memory columns are exact, the
# times are medians of a noisy machine.)
set -euo pipefail
BUILD="${1:-build}"; shift || true
"$BUILD/bin/bench_activation_checkpoint" --rounds 12 --warmup 1 --steps 1 "$@" 2>&1 | grep -v '^RESULT'
