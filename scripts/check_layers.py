#!/usr/bin/env python3
"""Checks that every #include "titan/..." in lib/titan points down the layers.

The library is a stack (docs/architecture.md, "Layers"): a folder may include
its own folder and the folders below it, never one above. Prints each include
that points up as FILE:LINE and exits 1; prints the layer counts and exits 0
when there is none.

    python3 scripts/check_layers.py [REPO_ROOT]
"""
import pathlib
import re
import sys

# Bottom to top. Folders on one line share a layer and may include each other.
LAYERS = [
    ["util"],        # errors, strings, files, ranges, gauges: no titan deps
    ["config"],      # JobConfig, TOML, CLI overrides, validation
    ["dist"],        # process groups, device mesh, backends, launch env
    ["dtensor"],     # DTensor, placements, redistribute
    ["ops"],         # modules, attention kernels, cross-entropy, float8
    ["data"],        # tokenizers, documents, the dataloader
    ["optim"],       # optimizers, LR schedules
    ["metrics"],     # logging, MFU, tensorboard, memory counters
    ["profiling"],   # traces, memory snapshots, timelines
    ["parallel"],    # DP, FSDP, TP/SP, PP, CP, AC, compositions
    ["models"],      # Llama 3, its parallelize plan and HF mapping
    ["estimate"],    # memory and FLOP estimates of a config
    ["checkpoint"],  # DCP, safetensors, HF folders
    ["launch"],      # the multi-process launcher
    ["train"],       # the trainer
    ["verify"],      # reference runs and equivalence checks
]
LEVEL = {folder: i for i, layer in enumerate(LAYERS) for folder in layer}
INCLUDE = re.compile(r'^\s*#\s*include\s+"titan/([a-z0-9_]+)/')


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
    lib = root / "lib" / "titan"
    bad, counted, unknown = [], 0, set()
    for path in sorted(lib.rglob("*")):
        if path.suffix not in (".hpp", ".cpp", ".cu", ".cuh", ".h") or path.parent == lib:
            continue
        own = path.relative_to(lib).parts[0]
        if own not in LEVEL:
            unknown.add(own)
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            counted += 1
            target = m.group(1)
            if target not in LEVEL:
                unknown.add(target)
            elif LEVEL[target] > LEVEL[own]:
                bad.append(f"{path.relative_to(root)}:{n}: {own}/ includes {target}/, a higher layer")
    if unknown:
        print("check_layers: folders missing from LAYERS: " + ", ".join(sorted(unknown)))
        return 1
    for b in bad:
        print(b)
    if bad:
        print(f"check_layers: {len(bad)} include(s) point up (layers, bottom to top: "
              + " < ".join("/".join(l) for l in LAYERS) + ")")
        return 1
    print(f"check_layers: {counted} titan includes, all point down or sideways")
    return 0


if __name__ == "__main__":
    sys.exit(main())
