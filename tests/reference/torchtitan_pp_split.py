#!/usr/bin/env python3
"""torchtitan's pipeline split, run from the installed torchtitan package.

Reads lines "n_layers num_stages input_weight output_weight" on stdin and
prints, per line, the number of transformer layers each stage gets from
torchtitan's generate_llm_fqn_per_model_part (torchtitan/distributed/
pipeline_parallel.py), or "error: <its message>" where it raises. With
--names, the module names of each stage instead, as titan's command line
spells a list of lists ("tok_embeddings,layers.0;layers.1,norm,output"):
what torchtitan would put in module_fqns_per_model_part.

The package is installed without its dependencies (scripts/setup.sh), so
importing torchtitan.distributed would fail on them: the one function is
taken out of the installed file's syntax tree and run on its own (it uses
only builtins). Nothing of it is copied here.
"""

import ast
import importlib.metadata
import sys


def load_split():
    path = importlib.metadata.distribution("torchtitan").locate_file("torchtitan/distributed/pipeline_parallel.py")
    tree = ast.parse(open(path, encoding="utf-8").read(), str(path))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "generate_llm_fqn_per_model_part")
    namespace = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), namespace)
    return namespace["generate_llm_fqn_per_model_part"]


def main():
    names = sys.argv[1:] == ["--names"]
    split = load_split()
    for line in sys.stdin:
        if not line.strip():
            continue
        n_layers, num_stages, input_weight, output_weight = (int(x) for x in line.split())
        try:
            parts = split(num_stages, n_layers, input_weight, output_weight)
        except ValueError as e:
            print("error: " + str(e).replace("\n", " "))
            continue
        if names:
            print(";".join(",".join(part) for part in parts))
        else:
            print(" ".join(str(sum(1 for m in part if m.startswith("layers."))) for part in parts))


if __name__ == "__main__":
    main()
