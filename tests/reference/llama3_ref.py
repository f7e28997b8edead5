#!/usr/bin/env python3
"""Independent plain-PyTorch Llama 3 used to cross-check the C++ model.

Written from the architecture description (Meta's Llama 3 / torchtitan), not
from the C++ code, and deliberately with different kernels where there is a
choice: complex-number RoPE instead of real pairs, an explicit masked softmax
instead of scaled_dot_product_attention, repeat_interleave for GQA, RMSNorm
written out. Agreement therefore checks the math, not a shared bug.

Usage:
  llama3_ref.py compare WEIGHTS INPUTS OUTPUTS [--tol T]
      WEIGHTS: safetensors with the C++ model's parameters (torchtitan names)
               and __metadata__ {"config": JSON of the model args, "seed": N}
      INPUTS:  safetensors with "tokens" and "labels" (int64 [batch, seq])
      OUTPUTS: safetensors the C++ test wrote: "logits", "loss" and
               "grad.<param name>" for every parameter; optionally
               "trunc_normal_probe" (see check_init)
  Recomputes logits, loss and gradients in fp32 and prints, per tensor, the
  max abs difference and that difference relative to the tensor's max
  magnitude. Exits 1 if any relative difference exceeds --tol. Also checks
  that torchtitan's initialisation, replayed here with the same seed, draws
  exactly the C++ weights.
"""

import argparse
import json
import math
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file


def ffn_hidden(dim, multiple_of, multiplier):
    hidden = 4 * dim
    hidden = int(2 * hidden / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def rope_freqs_cis(head_dim, seq_len, theta, scaling):
    """Complex e^{i t f} [seq, head_dim/2] with Llama 3.1 frequency scaling."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    if scaling["enabled"]:
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        original = scaling["original_max_position"]
        low_wavelen, high_wavelen = original / low, original / high
        new = []
        for f in freqs.tolist():
            wavelen = 2 * math.pi / f
            if wavelen < high_wavelen:
                new.append(f)
            elif wavelen > low_wavelen:
                new.append(f / factor)
            else:
                smooth = (original / wavelen - low) / (high - low)
                new.append((1 - smooth) * f / factor + smooth * f)
        freqs = torch.tensor(new, dtype=torch.float32)
    angles = torch.outer(torch.arange(seq_len).float(), freqs)
    return torch.polar(torch.ones_like(angles), angles)


def apply_rope(x, freqs_cis):
    # x [b, s, h, d]: channel pairs (2i, 2i+1) are one complex number.
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    out = torch.view_as_real(xc * freqs_cis[None, :, None, :]).flatten(3)
    return out.type_as(x)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def forward(p, cfg, tokens):
    dim, n_heads = cfg["dim"], cfg["n_heads"]
    n_kv = cfg["n_kv_heads"] or n_heads
    hd = dim // n_heads
    b, s = tokens.shape
    freqs_cis = rope_freqs_cis(hd, s, cfg["rope_theta"], cfg["rope_scaling"])
    mask = torch.full((s, s), float("-inf")).triu(1)
    h = p["tok_embeddings.weight"][tokens]
    for i in range(cfg["n_layers"]):
        pre = f"layers.{i}."
        x = rms_norm(h, p[pre + "attention_norm.weight"], cfg["norm_eps"])
        q = (x @ p[pre + "attention.wq.weight"].T).view(b, s, n_heads, hd)
        k = (x @ p[pre + "attention.wk.weight"].T).view(b, s, n_kv, hd)
        v = (x @ p[pre + "attention.wv.weight"].T).view(b, s, n_kv, hd)
        q, k = apply_rope(q, freqs_cis), apply_rope(k, freqs_cis)
        k = k.repeat_interleave(n_heads // n_kv, dim=2)
        v = v.repeat_interleave(n_heads // n_kv, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(hd) + mask
        att = torch.softmax(scores, dim=-1) @ v
        att = att.transpose(1, 2).reshape(b, s, n_heads * hd)
        h = h + att @ p[pre + "attention.wo.weight"].T
        x = rms_norm(h, p[pre + "ffn_norm.weight"], cfg["norm_eps"])
        ff = F.silu(x @ p[pre + "feed_forward.w1.weight"].T) * (x @ p[pre + "feed_forward.w3.weight"].T)
        h = h + ff @ p[pre + "feed_forward.w2.weight"].T
    h = rms_norm(h, p["norm.weight"], cfg["norm_eps"])
    return h @ p["output.weight"].T


def replay_init(cfg, seed, shapes):
    """torchtitan's init_weights order and distributions, from the seed."""
    torch.manual_seed(seed)
    w = {}

    def trunc(name, std, a=-2.0, b=2.0):
        t = torch.empty(shapes[name])
        torch.nn.init.trunc_normal_(t, mean=0.0, std=std, a=a, b=b)
        w[name] = t

    w["tok_embeddings.weight"] = torch.empty(shapes["tok_embeddings.weight"]).normal_()
    for i in range(cfg["n_layers"]):
        pre = f"layers.{i}."
        std = 0.02 / (2 * (i + 1)) ** 0.5 if cfg["depth_init"] else 0.02 / (2 * cfg["n_layers"]) ** 0.5
        w[pre + "attention_norm.weight"] = torch.ones(shapes[pre + "attention_norm.weight"])
        w[pre + "ffn_norm.weight"] = torch.ones(shapes[pre + "ffn_norm.weight"])
        for n in ("wq", "wk", "wv"):
            trunc(pre + f"attention.{n}.weight", 0.02)
        trunc(pre + "attention.wo.weight", std)
        trunc(pre + "feed_forward.w1.weight", 0.02)
        trunc(pre + "feed_forward.w2.weight", std)
        trunc(pre + "feed_forward.w3.weight", std)
    w["norm.weight"] = torch.ones(shapes["norm.weight"])
    out_std = cfg["dim"] ** -0.5
    trunc("output.weight", out_std, -3 * out_std, 3 * out_std)
    return w


def diff(a, b):
    a, b = a.double(), b.double()
    abs_diff = (a - b).abs().max().item() if a.numel() else 0.0
    scale = b.abs().max().item() if b.numel() else 0.0
    return abs_diff, abs_diff / scale if scale > 0 else abs_diff


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["compare"])
    ap.add_argument("weights")
    ap.add_argument("inputs")
    ap.add_argument("outputs")
    ap.add_argument("--tol", type=float, default=1e-5)
    args = ap.parse_args()
    torch.set_num_threads(1)  # the C++ test is single-threaded too; keeps timing flat

    with safe_open(args.weights, framework="pt") as f:
        meta = f.metadata()
    cfg = json.loads(meta["config"])
    seed = int(meta["seed"])
    weights = load_file(args.weights)
    inputs = load_file(args.inputs)
    cpp = load_file(args.outputs)

    failures = []
    expected = ["tok_embeddings.weight", "norm.weight", "output.weight"]
    for i in range(cfg["n_layers"]):
        for n in ("attention.wq", "attention.wk", "attention.wv", "attention.wo", "feed_forward.w1",
                  "feed_forward.w2", "feed_forward.w3", "attention_norm", "ffn_norm"):
            expected.append(f"layers.{i}.{n}.weight")
    if sorted(expected) != sorted(weights):
        failures.append("parameter names differ: " + str(sorted(set(expected) ^ set(weights))))

    # 1. Initialisation: same seed, same draws (bitwise on the CPU).
    replay = replay_init(cfg, seed, {k: v.shape for k, v in weights.items()})
    worst_init = max(diff(weights[k], replay[k])[0] for k in expected if k in weights)
    print(f"init replay: max |C++ - Python| over all weights = {worst_init:.3e}")
    if worst_init != 0.0:
        failures.append(f"init differs from torchtitan's replayed init ({worst_init:.3e})")
    if "trunc_normal_probe" in cpp:
        torch.manual_seed(int(meta["probe_seed"]))
        ref = torch.empty(cpp["trunc_normal_probe"].shape)
        torch.nn.init.trunc_normal_(ref, mean=0.5, std=2.0, a=-1.0, b=3.0)
        d = diff(cpp["trunc_normal_probe"], ref)[0]
        print(f"trunc_normal_ probe vs torch.nn.init.trunc_normal_: max abs diff {d:.3e}")
        if d != 0.0:
            failures.append(f"trunc_normal_ probe differs ({d:.3e})")

    # 2. Forward, loss and backward in fp32.
    params = {k: v.clone().requires_grad_(True) for k, v in weights.items()}
    logits = forward(params, cfg, inputs["tokens"])
    loss = F.cross_entropy(logits.flatten(0, 1), inputs["labels"].flatten())
    loss.backward()

    rows = [("logits", cpp["logits"], logits.detach()), ("loss", cpp["loss"], loss.detach().reshape(cpp["loss"].shape))]
    for k in sorted(params):
        rows.append(("grad." + k, cpp["grad." + k], params[k].grad))
    print(f"{'tensor':44s} {'max|abs diff|':>14s} {'rel to max|ref|':>16s}")
    for name, c, r in rows:
        if tuple(c.shape) != tuple(r.shape):
            failures.append(f"{name}: shape {tuple(c.shape)} vs {tuple(r.shape)}")
            continue
        a, rel = diff(c, r)
        flag = "" if rel <= args.tol else "  <-- above tolerance"
        print(f"{name:44s} {a:14.3e} {rel:16.3e}{flag}")
        if rel > args.tol:
            failures.append(f"{name}: relative difference {rel:.3e} > {args.tol:g}")
    if failures:
        print("FAIL: " + "; ".join(failures))
        return 1
    print(f"OK: logits, loss and {len(params)} gradients agree within {args.tol:g} (relative to max |ref|)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
