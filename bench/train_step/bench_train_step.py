#!/usr/bin/env python3
"""Tokens/s of `titan train` against eager PyTorch doing the same step.

Runs, side by side in one invocation and alternating so that machine noise
hits both alike:
  * C++:    `titan train` on a fixed config (debugmodel by default) for N
            steps; per-step wall times come from its metrics.jsonl.
  * Python: tests/reference/llama3_ref.py's Llama 3 (same dims, same batch and
            seq_len, fp32) under torch.optim.AdamW with torchtitan's
            hyper-parameters, the same warm-up + linear-decay LR schedule,
            gradient clipping at max_norm 1.0 and a loss.item() per step, as
            the C++ trainer does.
titan runs four times: as configured by default (its fused kernels,
[model] fused_kernels, and oneDNN's GEMM for its Linear layers where
titan's oneDNN plugin loads, [model] cpu_matmul = "auto": AVX-512 on AMD
CPUs, where MKL's sgemm runs its AVX2 path), with aten::mm for its Linear
layers (cpu_matmul = "aten": the GEMM eager runs, so the ratio isolates
everything else), op by op (fused_kernels = false: ATen's RMSNorm, SiLU
and product, RoPE and cross-entropy, as the Python side computes them),
and with titan's own flash attention kernel instead of ATen's SDPA
([model] attn_type = "flash").
After the timed rounds one more step of each contender is profiled (not
timed) and the CPU time of its ops split into GEMMs, attention and
everything else (--no-breakdown skips it).
`titan` keeps freed blocks below 32 MiB in the process (glibc's malloc
thresholds, util/host_allocator.hpp); Python runs with glibc's defaults unless
--py-keep-freed-memory gives it the same thresholds.
Both use the same thread count (OMP_NUM_THREADS for titan, torch.set_num_threads
for Python). The first --warmup steps of each run are skipped; the median
step time of the rest gives tokens/s.

The reference model, written as a cross-check, computes attention as an
explicit masked softmax; titan uses scaled_dot_product_attention. So the
Python side runs twice: "as written" and with F.scaled_dot_product_attention
(--py-attention both|ref|sdpa), and the ratio is reported against each.

Usage: bench/train_step/run.sh [--steps 30] [--warmup 5] [--threads 2] ...
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import llama3_ref as ref  # noqa: E402

# torchtitan's debugmodel (lib/titan/models/llama3/model_args.cpp).
DEBUGMODEL = dict(dim=256, n_layers=6, n_heads=16, n_kv_heads=None, vocab_size=2048, multiple_of=256,
                  ffn_dim_multiplier=None, norm_eps=1e-5, rope_theta=500000.0, depth_init=True,
                  rope_scaling=dict(enabled=True, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                    original_max_position=8192))
# Each bench model: the Python side's dims, titan's [model] flavor and shape
# overrides that make the same model, and the batch it is timed at.
FLAVORS = {
    "debugmodel": dict(cfg=DEBUGMODEL, titan=["--model.flavor", "debugmodel"], batch_size=4, seq_len=128),
    # The debug model widened to dim 1024 (head_dim 64, FFN 2816), 4 blocks,
    # seq 512: GEMMs weigh more in its step than in the debug model's.
    "wide": dict(cfg=dict(DEBUGMODEL, dim=1024, n_layers=4),
                 titan=["--model.flavor", "debugmodel", "--model.dim", "1024", "--model.n_layers", "4"],
                 batch_size=1, seq_len=512),
}


def shapes(cfg):
    d, v, hd = cfg["dim"], cfg["vocab_size"], cfg["dim"] // cfg["n_heads"]
    kv = (cfg["n_kv_heads"] or cfg["n_heads"]) * hd
    f = ref.ffn_hidden(d, cfg["multiple_of"], cfg["ffn_dim_multiplier"])
    s = {"tok_embeddings.weight": (v, d), "norm.weight": (d,), "output.weight": (v, d)}
    for i in range(cfg["n_layers"]):
        p = f"layers.{i}."
        s.update({p + "attention_norm.weight": (d,), p + "ffn_norm.weight": (d,),
                  p + "attention.wq.weight": (d, d), p + "attention.wk.weight": (kv, d),
                  p + "attention.wv.weight": (kv, d), p + "attention.wo.weight": (d, d),
                  p + "feed_forward.w1.weight": (f, d), p + "feed_forward.w2.weight": (d, f),
                  p + "feed_forward.w3.weight": (f, d)})
    return s


def forward_sdpa(p, cfg, tokens, freqs_cis):
    """ref.forward with the attention core replaced by SDPA (titan's kernel)."""
    dim, n_heads = cfg["dim"], cfg["n_heads"]
    n_kv = cfg["n_kv_heads"] or n_heads
    hd = dim // n_heads
    b, s = tokens.shape
    h = p["tok_embeddings.weight"][tokens]
    for i in range(cfg["n_layers"]):
        pre = f"layers.{i}."
        x = ref.rms_norm(h, p[pre + "attention_norm.weight"], cfg["norm_eps"])
        q = (x @ p[pre + "attention.wq.weight"].T).view(b, s, n_heads, hd)
        k = (x @ p[pre + "attention.wk.weight"].T).view(b, s, n_kv, hd)
        v = (x @ p[pre + "attention.wv.weight"].T).view(b, s, n_kv, hd)
        q, k = ref.apply_rope(q, freqs_cis), ref.apply_rope(k, freqs_cis)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=n_kv != n_heads)
        h = h + att.transpose(1, 2).reshape(b, s, dim) @ p[pre + "attention.wo.weight"].T
        x = ref.rms_norm(h, p[pre + "ffn_norm.weight"], cfg["norm_eps"])
        ff = F.silu(x @ p[pre + "feed_forward.w1.weight"].T) * (x @ p[pre + "feed_forward.w3.weight"].T)
        h = h + ff @ p[pre + "feed_forward.w2.weight"].T
    h = ref.rms_norm(h, p["norm.weight"], cfg["norm_eps"])
    return h @ p["output.weight"].T


# Where a step's CPU time goes, from a profiler trace: self time of each op
# (its time minus its children's), summed by class.
GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear", "titan::mm"}


def op_class(name):
    if name in GEMM_OPS:
        return "GEMM"
    # ATen's SDPA, titan's flash forward (titan::flash_attention) and its
    # backward node (FlashAttentionFunction).
    if "scaled_dot_product" in name or "flash_attention" in name or "FlashAttentionFunction" in name:
        return "attention"
    return "everything else"


def shares(self_times):
    """{op name: self µs} -> {class: fraction of the total}."""
    total = sum(self_times.values()) or 1.0
    out = {"GEMM": 0.0, "attention": 0.0, "everything else": 0.0}
    for name, us in self_times.items():
        out[op_class(name)] += us / total
    return out


def trace_self_times(path):
    """Self time per cpu_op name of a Chrome trace (titan's Kineto trace)."""
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    events.sort(key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    self_us, stacks = {}, {}
    for e in events:
        stack = stacks.setdefault(e["tid"], [])
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
            stack.pop()
        if stack:
            self_us[stack[-1]["name"]] = self_us.get(stack[-1]["name"], 0.0) - e["dur"]
        self_us[e["name"]] = self_us.get(e["name"], 0.0) + e["dur"]
        stack.append(e)
    return self_us


def keep_freed_host_memory():
    """What titan's keep_freed_host_memory() does, for this Python process."""
    import ctypes
    libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
    if not (libc.mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 and libc.mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1):
        sys.exit("mallopt refused the thresholds")


def python_step_times(cfg, args, attention, profile=False):
    torch.manual_seed(0)
    init = ref.replay_init(cfg, 0, shapes(cfg))
    params = {k: v.requires_grad_(True) for k, v in init.items()}
    opt = torch.optim.AdamW(params.values(), lr=args.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    warm = max(1, args.lr_warmup)

    def lr_lambda(k):  # torchtitan's linear warm-up + linear decay (no stable phase)
        if k < warm:
            return (k + 1) / warm
        decay = args.steps + 1 - warm
        return 1.0 - (k + 1 - warm) / decay

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    freqs_cis = ref.rope_freqs_cis(cfg["dim"] // cfg["n_heads"], args.seq_len, cfg["rope_theta"],
                                   cfg["rope_scaling"])
    def step():
        tokens = torch.randint(0, cfg["vocab_size"], (args.batch_size, args.seq_len + 1))
        x, y = tokens[:, :-1], tokens[:, 1:]
        opt.zero_grad(set_to_none=True)
        logits = ref.forward(params, cfg, x) if attention == "ref" else forward_sdpa(params, cfg, x, freqs_cis)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        opt.step()
        sched.step()
        loss.item()

    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    if not profile:
        return times
    # One more step under the profiler, not timed: its op breakdown.
    from torch.profiler import profile as torch_profile
    with torch_profile() as prof:
        step()
    return {e.key: e.self_cpu_time_total for e in prof.key_averages()}


# titan's contenders: the flags each adds to `titan train`.
TITAN_CONTENDERS = {
    "titan (C++)": [],
    # aten::mm (MKL's sgemm, what eager runs) for the Linear layers instead
    # of oneDNN's matmul: [model] cpu_matmul.
    "titan, aten::mm GEMM": ["--model.cpu_matmul", "aten"],
    "titan, op by op": ["--model.fused_kernels", "false"],
    "titan, flash attention": ["--model.attn_type", "flash"],
}


def titan_step_times(args, contender, profile=False):
    with tempfile.TemporaryDirectory(prefix="titan_bench_") as dump:
        cmd = [args.titan, "train", "--job.config_file", os.path.join(ROOT, "train_configs", "debug_model.toml"),
               "--job.dump_folder", dump, "--training.device", "cpu", *FLAVORS[args.flavor]["titan"],
               "--training.steps", str(args.steps), "--training.batch_size", str(args.batch_size),
               "--training.seq_len", str(args.seq_len), "--optimizer.lr", str(args.lr),
               "--lr_scheduler.warmup_steps", str(args.lr_warmup), "--metrics.log_freq", str(args.steps),
               *TITAN_CONTENDERS[contender]]
        if profile:  # a Kineto trace of the last step (not timed)
            cmd += ["--profiling.enable_profiling", "true", "--profiling.profile_freq", str(args.steps)]
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("titan train failed:\n" + r.stdout + r.stderr)
        if profile:
            return trace_self_times(os.path.join(dump, "profile_trace", f"iteration_{args.steps}", "rank0_trace.json"))
        with open(os.path.join(dump, "metrics.jsonl")) as f:
            return [json.loads(line)["step_time_s"] for line in f]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--titan", default=os.path.join(ROOT, "build", "bin", "titan"))
    ap.add_argument("--flavor", default="debugmodel", choices=sorted(FLAVORS))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5, help="leading steps left out of the median")
    ap.add_argument("--batch-size", type=int, help="default: the flavor's (debugmodel 4, wide 1)")
    ap.add_argument("--seq-len", type=int, help="default: the flavor's (debugmodel 128, wide 512)")
    ap.add_argument("--lr", type=float, default=8e-4)
    ap.add_argument("--lr-warmup", type=int, default=10)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of every contender")
    ap.add_argument("--py-attention", default="both", choices=["both", "ref", "sdpa"])
    ap.add_argument("--titan-aten", action=argparse.BooleanOptionalAction, default=True,
                    help="also time titan with aten::mm, eager's GEMM, for its Linear layers "
                         "([model] cpu_matmul aten)")
    ap.add_argument("--titan-op-by-op", action=argparse.BooleanOptionalAction, default=True,
                    help="also time titan with [model] fused_kernels = false")
    ap.add_argument("--titan-flash", action=argparse.BooleanOptionalAction, default=True,
                    help="also time titan with [model] attn_type = flash (titan's CPU flash kernel)")
    ap.add_argument("--py-keep-freed-memory", action="store_true",
                    help="give the Python contenders glibc's malloc thresholds that `titan` sets at start "
                         "(util/host_allocator.hpp: mmap threshold 32 MiB, trim threshold 1 GiB)")
    ap.add_argument("--breakdown", action=argparse.BooleanOptionalAction, default=True,
                    help="after the timed rounds, profile one step of each contender: CPU time in GEMMs, "
                         "attention and everything else")
    args = ap.parse_args()
    if args.steps <= args.warmup:
        sys.exit("--steps must exceed --warmup")
    torch.set_num_threads(args.threads)
    if args.py_keep_freed_memory:
        keep_freed_host_memory()
    cfg = FLAVORS[args.flavor]["cfg"]
    args.batch_size = args.batch_size or FLAVORS[args.flavor]["batch_size"]
    args.seq_len = args.seq_len or FLAVORS[args.flavor]["seq_len"]

    contenders = ["titan (C++)"]
    if args.titan_aten:
        contenders.append("titan, aten::mm GEMM")
    if args.titan_op_by_op:
        contenders.append("titan, op by op")
    if args.titan_flash:
        contenders.append("titan, flash attention")
    if args.py_attention in ("both", "sdpa"):
        contenders.append("python eager, sdpa")
    if args.py_attention in ("both", "ref"):
        contenders.append("python eager, ref as written")
    times = {c: [] for c in contenders}
    for rnd in range(args.rounds):
        for c in contenders:
            if c.startswith("titan"):
                t = titan_step_times(args, c)
            else:
                t = python_step_times(cfg, args, "sdpa" if "sdpa" in c else "ref")
            times[c] += t[args.warmup:]
            print(f"round {rnd + 1}: {c:30s} median step {statistics.median(t[args.warmup:]) * 1e3:8.1f} ms",
                  flush=True)

    tokens = args.batch_size * args.seq_len
    print(f"\n{args.flavor}, batch {args.batch_size} x seq {args.seq_len}, {args.threads} threads, "
          f"{args.steps} steps x {args.rounds} rounds (first {args.warmup} of each run skipped), torch {torch.__version__}")
    print(f"{'contender':32s} {'median step':>12s} {'tokens/s':>10s} {'titan speed-up':>15s}")
    cpp = statistics.median(times["titan (C++)"])
    for c in contenders:
        m = statistics.median(times[c])
        print(f"{c:32s} {m * 1e3:10.1f}ms {tokens / m:10,.0f} {m / cpp:14.2f}x")
    if not args.breakdown:
        return
    # Where each contender's step goes (one profiled step each, self CPU time
    # of the ops, so the profiler's own overhead is in no class).
    print(f"\n{'contender':32s} {'GEMM':>8s} {'attention':>10s} {'everything else':>16s}  (share of profiled op time)")
    for c in contenders:
        if c.startswith("titan"):
            st = titan_step_times(args, c, profile=True)
        else:
            st = python_step_times(cfg, args, "sdpa" if "sdpa" in c else "ref", profile=True)
        sh = shares(st)
        print(f"{c:32s} {sh['GEMM'] * 100:7.1f}% {sh['attention'] * 100:9.1f}% {sh['everything else'] * 100:15.1f}%")


if __name__ == "__main__":
    main()
