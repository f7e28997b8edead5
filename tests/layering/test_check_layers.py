#!/usr/bin/env python3
"""scripts/check_layers.py on small made-up trees: it must name an include
that points up a layer, and a cycle of subfolders inside one folder (the
float8 <-> tensor_parallel tangle it was extended to see), and pass a tree
with neither."""
import pathlib
import subprocess
import sys
import tempfile

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "check_layers.py"


def run(files):
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            path = pathlib.Path(root, "lib", "titan", rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        r = subprocess.run([sys.executable, str(SCRIPT), root], capture_output=True, text=True)
        return r.returncode, r.stdout


def include(target):
    return f'#include "titan/{target}"\n'


failures = []


def expect(name, cond, out):
    print(("ok   " if cond else "FAIL ") + name)
    if not cond:
        failures.append(name)
        print(out)


clean = {
    "parallel/float8/f.cpp": include("parallel/fsdp/s.hpp") + include("ops/x.hpp"),
    "parallel/fsdp/s.hpp": include("parallel/p.hpp"),
    "parallel/p.hpp": include("parallel/fsdp/s.hpp"),  # a folder's own files are not a unit
    "ops/x.hpp": "",
}
rc, out = run(clean)
expect("a clean tree passes", rc == 0 and "no cycle" in out, out)

rc, out = run({**clean, "ops/y.cpp": include("parallel/p.hpp")})
expect("an include up a layer is named", rc == 1 and "lib/titan/ops/y.cpp:1: ops/ includes parallel/" in out, out)

tangle = {**clean,
          "parallel/tensor_parallel/a.cpp": include("parallel/float8/f.hpp"),
          "parallel/float8/f.hpp": include("parallel/tensor_parallel/t.hpp")}
rc, out = run(tangle)
expect("a two-subfolder cycle is named with its includes",
       rc == 1 and "parallel/float8 -> parallel/tensor_parallel -> parallel/float8 is a cycle" in out
       and "lib/titan/parallel/float8/f.hpp:1: parallel/float8/ includes parallel/tensor_parallel/" in out
       and "lib/titan/parallel/tensor_parallel/a.cpp:1: parallel/tensor_parallel/ includes parallel/float8/" in out, out)

rc, out = run({**clean,
               "parallel/a/a.hpp": include("parallel/b/b.hpp"),
               "parallel/b/b.hpp": include("parallel/c/c.hpp"),
               "parallel/c/c.hpp": include("parallel/a/a.hpp")})
expect("a three-subfolder cycle is named", rc == 1 and "parallel/a -> parallel/b -> parallel/c -> parallel/a" in out, out)

sys.exit(1 if failures else 0)
