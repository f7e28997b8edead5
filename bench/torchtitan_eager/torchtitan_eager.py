#!/usr/bin/env python3
"""Tokens/s of torchtitan's own Llama 3 model in eager PyTorch on one device,
trained the way torchtitan trains on one GPU: its Transformer and
init_weights, forward and loss under bf16 autocast (torchtitan's
maybe_enable_amp without FSDP), cross-entropy over fp32 logits summed and
divided by the batch's target count, fused AdamW with torchtitan's defaults
(betas 0.9/0.95, eps 1e-8, weight decay 0.1), gradient clipping at 1.0 and
one loss.item() per step. The reference titan's capstone is measured
against (scripts/gpu_check.sh, step 3).

torchtitan is imported from --torchtitan (else the installed one): its wheel (unpacked to a
temporary folder: some of its packages have no __init__.py, which a zip
import does not find) or a source folder. Only its model code runs; the modules its
packages import on the way that this machine lacks (datasets, tyro,
torchdata, ...) are replaced by inert stubs, since nothing of them is
called. --stub forces a stub even for an installed module (tests use it to
act out a bare machine).

Prints one line of JSON: tokens/s (median step after --warmup), the median
step time, the peak memory the device allocator saw, the first and last
losses, the parameter count.
"""

import argparse
import importlib
import importlib.abc
import importlib.machinery
import json
import statistics
import sys
import tempfile
import time
import types
import zipfile

OPTIONAL = ["datasets", "tyro", "torchdata", "tomli", "tokenizers", "fsspec", "blobfile", "tiktoken", "wandb",
            "tensorboard", "torchft", "torchao", "safetensors", "huggingface_hub", "transformers"]


class _InertBase:
    """What a class deriving from a stub derives from instead: a plain
    class, so that it mixes with abstract classes and protocols."""

    def __init__(self, *args, **kwargs):
        pass


class _Inert:
    """Anything a stubbed module hands out: it can be called, used as a base
    class or a decorator, indexed, iterated, and its attributes are inert
    too (tyro.constructors.ConstructorRegistry). It does nothing."""

    def __call__(self, *args, **kwargs):
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else _Inert()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert()

    def __getitem__(self, key):
        return self

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __mro_entries__(self, bases):
        return (_InertBase,)


class _StubModule(types.ModuleType):
    def __init__(self, name):
        super().__init__(name)
        self.__path__ = []  # a package: `import datasets.distributed` works too
        self.__file__ = "<stub>"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert()


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots):
        self.roots = set(roots)

    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == r or fullname.startswith(r + ".") for r in self.roots):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StubModule(spec.name)

    def exec_module(self, module):
        pass


def install_stubs(forced):
    missing = []
    for name in OPTIONAL:
        if name in forced:
            missing.append(name)
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a broken install counts as missing
            missing.append(name)
    # torch's TensorBoard writer refuses to import without the package.
    if "tensorboard" in missing:
        missing.append("torch.utils.tensorboard")
    for name in list(sys.modules):
        if any(name == r or name.startswith(r + ".") for r in missing):
            del sys.modules[name]
    sys.meta_path.insert(0, _StubFinder(missing))
    return missing


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--torchtitan", default="", help="torchtitan's wheel or source folder (default: the installed one)")
    p.add_argument("--stub", default="", help="comma-separated modules to stub even when installed")
    p.add_argument("--dim", type=int, default=4096)
    p.add_argument("--n-layers", type=int, default=4)
    p.add_argument("--n-heads", type=int, default=32)
    p.add_argument("--n-kv-heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--multiple-of", type=int, default=1024)
    p.add_argument("--ffn-dim-multiplier", type=float, default=1.3)
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=8192)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    stubbed = install_stubs(set(filter(None, a.stub.split(","))))
    where = a.torchtitan
    if where.endswith(".whl"):
        where = tempfile.mkdtemp(prefix="torchtitan_")
        zipfile.ZipFile(a.torchtitan).extractall(where)
    if where:
        sys.path.insert(0, where)
    import torch

    from torchtitan.models.llama3.model.args import TransformerModelArgs
    from torchtitan.models.llama3.model.model import Transformer

    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    args = TransformerModelArgs(dim=a.dim, n_layers=a.n_layers, n_heads=a.n_heads, n_kv_heads=a.n_kv_heads,
                                vocab_size=a.vocab, multiple_of=a.multiple_of,
                                ffn_dim_multiplier=a.ffn_dim_multiplier, rope_theta=a.rope_theta, max_seq_len=a.seq)
    with torch.device(device):
        model = Transformer(args)
    # torchtitan's own init (the trainer calls it with the RoPE buffer on the device).
    with torch.no_grad():
        model.init_weights(buffer_device=device)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            fused=device.type == "cuda")
    gen = torch.Generator(device="cpu").manual_seed(a.seed + 1)
    amp = (torch.autocast(device.type, dtype=torch.bfloat16) if a.dtype == "bfloat16" else None)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, losses = [], []
    for _ in range(a.steps):
        window = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen).to(device)
        inputs, labels = window[:, :-1], window[:, 1:]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if amp is not None:
            with amp:
                logits = model(inputs)
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1),
                                                         reduction="sum") / labels.numel()
        else:
            logits = model(inputs)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1),
                                                     reduction="sum") / labels.numel()
        del logits
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        losses.append(loss.item())  # the step's one host sync, as a trainer's log
        times.append(time.perf_counter() - t0)
    timed = times[a.warmup:] or times
    median = statistics.median(timed)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    print(json.dumps({"what": "torchtitan eager", "tokens_per_s": a.batch * a.seq / median, "step_s_median": median,
                      "peak_bytes": peak, "loss_first": losses[0], "loss_last": losses[-1], "params": n_params,
                      "steps": a.steps, "stubbed": stubbed}))


if __name__ == "__main__":
    main()
