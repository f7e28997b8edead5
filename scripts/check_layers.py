#!/usr/bin/env python3
"""Checks that every #include "titan/..." in lib/titan points down the layers.

The library is a stack (docs/architecture.md, "Layers"): a folder may include
its own folder and the folders below it, never one above. Inside a folder,
its subfolders (parallel/fsdp, parallel/float8, ops/attention, ...) may
include each other, but not in a cycle: two techniques that include each
other are one tangle, not two. (A folder's own files are small pieces used
on every side, not one unit: they are not part of the cycle check.) Prints each include that points up, and each
cycle of subfolders with an include for every step of it, as FILE:LINE, and
exits 1; prints the counts and exits 0 when there is none.

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
    ["predict"],     # step time and MFU of a layout on a cluster
]
LEVEL = {folder: i for i, layer in enumerate(LAYERS) for folder in layer}
INCLUDE = re.compile(r'^\s*#\s*include\s+"titan/([a-z0-9_]+)/(?:([a-z0-9_]+)/)?')


def subfolder(parts):
    """"parallel/fsdp" for parallel/fsdp/x.hpp, "parallel" for parallel/x.hpp."""
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def cycles(edges):
    """The cycles of a graph {node: {node: example}}, each as its node list
    (one per strongly connected component of more than one node: the
    shortest way round from its smallest node)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    found = []
    for comp in out:
        start, members = comp[0], set(comp)
        # Breadth-first from start back to start inside the component.
        paths, seen = [[start]], {start}
        while paths:
            path = paths.pop(0)
            nxt = [w for w in sorted(edges.get(path[-1], {})) if w in members]
            if start in nxt:
                found.append(path)
                break
            for w in nxt:
                if w not in seen:
                    seen.add(w)
                    paths.append(path + [w])
    return found


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
    lib = root / "lib" / "titan"
    bad, counted, unknown = [], 0, set()
    inside = {}  # subfolder -> {subfolder of the same folder it includes: "FILE:LINE"}
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
            elif target == own:
                here = subfolder(path.relative_to(lib).parts)
                there = target + "/" + m.group(2) if m.group(2) else target
                if here != there and "/" in here and "/" in there:
                    inside.setdefault(here, {}).setdefault(there, f"{path.relative_to(root)}:{n}")
    if unknown:
        print("check_layers: folders missing from LAYERS: " + ", ".join(sorted(unknown)))
        return 1
    for b in bad:
        print(b)
    if bad:
        print(f"check_layers: {len(bad)} include(s) point up (layers, bottom to top: "
              + " < ".join("/".join(l) for l in LAYERS) + ")")
    loops = cycles(inside)
    for loop in loops:
        print("check_layers: " + " -> ".join(loop + [loop[0]]) + " is a cycle:")
        for a, b in zip(loop, loop[1:] + [loop[0]]):
            print(f"  {inside[a][b]}: {a}/ includes {b}/")
    if bad or loops:
        return 1
    pairs = sum(len(v) for v in inside.values())
    print(f"check_layers: {counted} titan includes, all point down or sideways; "
          f"{pairs} subfolder dependencies inside folders, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
