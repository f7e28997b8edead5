"""Reads a titan checkpoint with PyTorch's own distributed-checkpoint
loader (torch.distributed.checkpoint + HuggingFaceStorageReader), which
assembles each tensor from the boxes every rank saved, and compares the
model tensors with the whole weights titan gathered (a safetensors file).

usage: dcp_read.py CHECKPOINT_DIR EXPECTED_WEIGHTS.safetensors
Exit 0 when every model tensor is bitwise equal and every optimizer moment
listed in metadata.json loads with its recorded shape.
"""
import json
import sys
import warnings

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
from torch.distributed.checkpoint import HuggingFaceStorageReader

ckpt, expected_path = sys.argv[1], sys.argv[2]
expected = load_file(expected_path)
meta = json.load(open(f"{ckpt}/metadata.json"))
state = {}
for fqn, entry in meta["tensors"].items():
    dtype = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}[entry["dtype"]]
    state[fqn] = torch.full(entry["shape"], float("nan"), dtype=dtype)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "assuming the intent is to load in a single process"
    dcp.load(state, storage_reader=HuggingFaceStorageReader(ckpt), no_dist=True)

bad = 0
for name, want in expected.items():
    got = state.get(name)
    if got is None:
        print(f"missing in the DCP load: {name}")
        bad += 1
        continue
    diff = (got.double() - want.double()).abs().max().item()
    if not torch.equal(got, want):
        print(f"{name}: max |diff| {diff:.3g}")
        bad += 1
moments = [k for k in state if k.startswith("optimizer.state.")]
for k in moments:
    if torch.isnan(state[k]).any():
        print(f"{k}: not fully loaded")
        bad += 1
chunks = sum(len(e["chunks"]) for e in meta["tensors"].values())
print(f"torch DCP read {len(state)} tensors from {chunks} saved boxes in {len(meta['files'])} files: "
      f"{len(expected)} model tensors {'bitwise equal' if bad == 0 else 'DIFFER'}, {len(moments)} optimizer moments")
sys.exit(1 if bad else 0)
