#!/bin/sh
# Runs `titan collectives` as 2 ranks under the venv's torchrun and checks
# that it exits 0 and that every rank saw the all-reduce of [0 1] + [10 11].
# Usage: torchrun_check.sh PYTHON TITAN
out=$("$1" -m torch.distributed.run --standalone --nproc_per_node=2 --no-python "$2" collectives 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || { echo "torchrun exited $rc"; exit 1; }
n=$(echo "$out" | grep -c "all_reduce  *\[10 12\]")
[ "$n" -eq 2 ] || { echo "expected 2 ranks to print the all-reduce, saw $n"; exit 1; }
echo "torchrun: 2 ranks, all-reduce correct"
