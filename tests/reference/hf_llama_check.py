#!/usr/bin/env python3
"""Checks titan's Hugging Face export/import against the real `transformers`.

  hf_llama_check.py export-check HF_DIR IO [--tol T]
      HF_DIR was written by titan's write_hf_folder; IO (safetensors) holds
      "tokens" [batch, seq] and titan's "logits" for them. Loads HF_DIR with
      LlamaForCausalLM.from_pretrained, runs the tokens, prints the max abs
      logits difference; exit 1 when it is above T. With --expect-tied, also
      exit 1 unless the loaded model shares one tensor for embed_tokens and
      lm_head (tie_word_embeddings).

  hf_llama_check.py make-random HF_DIR IO [--seed S] [--rope llama3|default]
                                          [--shape tiny|debugmodel] [--tied]
      Builds a small random LlamaForCausalLM (tiny: GQA, 2 layers, dim 64;
      debugmodel: titan's debugmodel flavor's shapes), saves it with
      save_pretrained into HF_DIR, and writes random "tokens" and
      transformers' "logits" for them into IO, for titan's read_hf_folder.
      --tied: tie_word_embeddings=True (save_pretrained then writes no
      lm_head.weight).

transformers is the independent reference here: its own config parsing,
rotate-half RoPE, Llama 3 frequency scaling, GQA and RMSNorm.
"""

import argparse
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

transformers.utils.logging.disable_progress_bar()  # keep the test log to the numbers


def export_check(args):
    io = load_file(args.io)
    model = LlamaForCausalLM.from_pretrained(args.hf_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    rope = getattr(model.config, "rope_parameters", None) or getattr(model.config, "rope_scaling", None)
    print(f"transformers {transformers.__version__}: loaded {args.hf_dir} "
          f"(heads {model.config.num_attention_heads}/{model.config.num_key_value_heads}, rope {rope})")
    with torch.no_grad():
        logits = model(io["tokens"]).logits
    diff = (logits - io["logits"]).abs().max().item()
    scale = io["logits"].abs().max().item()
    print(f"max |logits diff| titan vs transformers: {diff:.3e} (logits up to {scale:.3f}), tol {args.tol:.1e}")
    if not diff <= args.tol:
        print("above tolerance")
        return 1
    if args.expect_tied:
        shared = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
        print(f"tie_word_embeddings {model.config.tie_word_embeddings}, lm_head shares embed_tokens: {shared}")
        if not (model.config.tie_word_embeddings and shared):
            print("not tied")
            return 1
    return 0


def make_random(args):
    rope = None
    if args.shape == "tiny":
        if args.rope == "llama3":
            # Scaled around a short "original" context so that head_dim 16
            # has all three bands (kept, blended, divided).
            rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                             rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=rope,
                             tie_word_embeddings=args.tied)
        std = 0.15
    else:
        # torchtitan's debugmodel flavor (Llama 3.1 RoPE at Llama 3's theta).
        if args.rope == "llama3":
            rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
        config = LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=768, num_hidden_layers=6,
                             num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=16384,
                             rms_norm_eps=1e-5, rope_theta=500000.0, rope_scaling=rope,
                             tie_word_embeddings=args.tied)
        std = 0.06  # wider layers: a smaller std keeps the logits at a few units
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config)
    # HF's init (std 0.02, unit norms) leaves logits nearly uniform; larger
    # weights and non-unit norms make every tensor and the layout matter.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0.0, std)
    model.eval()
    model.save_pretrained(args.hf_dir)
    tokens = torch.randint(config.vocab_size, (2, 16), dtype=torch.int64)
    with torch.no_grad():
        logits = model(tokens).logits.contiguous()
    save_file({"tokens": tokens, "logits": logits}, args.io)
    print(f"transformers {transformers.__version__}: saved a random LlamaForCausalLM to {args.hf_dir} "
          f"(rope {args.rope}, tied {args.tied}); logits up to {logits.abs().max().item():.3f}")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export-check")
    e.add_argument("hf_dir")
    e.add_argument("io")
    e.add_argument("--tol", type=float, default=1e-5)
    e.add_argument("--expect-tied", action="store_true")
    m = sub.add_parser("make-random")
    m.add_argument("hf_dir")
    m.add_argument("io")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--rope", choices=["llama3", "default"], default="llama3")
    m.add_argument("--shape", choices=["tiny", "debugmodel"], default="tiny")
    m.add_argument("--tied", action="store_true")
    args = p.parse_args()
    return export_check(args) if args.command == "export-check" else make_random(args)


if __name__ == "__main__":
    sys.exit(main())
