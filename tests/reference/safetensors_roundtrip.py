#!/usr/bin/env python3
"""Checks titan's safetensors files against the official `safetensors` package.

  safetensors_roundtrip.py check FILE   FILE was written by titan (C++): load it
                                        with safetensors.torch and compare with
                                        the expected tensors below; exit 1 on
                                        any mismatch.
  safetensors_roundtrip.py write FILE   write the expected tensors with
                                        safetensors.torch for titan to read.

Both sides build the same tensors from the same recipe (expected()), so each
direction checks names, dtypes, shapes, values and metadata.
"""

import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

METADATA = {"format": "pt", "written_by": "titan-roundtrip"}


def expected():
    base = torch.arange(24, dtype=torch.float64).reshape(2, 3, 4) * 0.5 - 3.0
    return {
        "f64": base.clone(),
        "f32": base.float(),
        "f16": base.half(),
        "bf16": base.bfloat16(),
        "i64": torch.arange(-5, 5, dtype=torch.int64),
        "i32": torch.arange(-6, 6, dtype=torch.int32).reshape(3, 4),
        "i16": torch.arange(-3, 3, dtype=torch.int16),
        "i8": torch.arange(-4, 4, dtype=torch.int8),
        "u8": torch.arange(0, 250, 50, dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5, dtype=torch.float32),
        "empty": torch.zeros(0, 3, dtype=torch.float32),
    }


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "write":
        save_file(expected(), path, metadata=METADATA)
        return 0
    got = load_file(path)
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
    want = expected()
    errors = []
    if set(got) != set(want):
        errors.append(f"names {sorted(got)} != {sorted(want)}")
    for k, w in want.items():
        g = got.get(k)
        if g is None:
            continue
        if g.dtype != w.dtype or tuple(g.shape) != tuple(w.shape) or not torch.equal(g, w):
            errors.append(f"{k}: got {g.dtype} {tuple(g.shape)} {g.flatten()[:6].tolist()}, "
                          f"want {w.dtype} {tuple(w.shape)} {w.flatten()[:6].tolist()}")
    if meta != METADATA:
        errors.append(f"metadata {meta} != {METADATA}")
    if errors:
        print("FAIL: " + "; ".join(errors))
        return 1
    print(f"OK: {len(want)} tensors and metadata read back exactly by the safetensors package")
    return 0


if __name__ == "__main__":
    sys.exit(main())
