#!/usr/bin/env python3
"""Python references for titan.cpp's Hugging Face tokenizer (tests/data).

  make KIND TEXT VOCAB_SIZE DIR  trains a byte-level BPE on the file TEXT with
                                 the `tokenizers` package and writes
                                 DIR/tokenizer.json and DIR/tokenizer_config.json.
                                 KIND: gpt2 (ByteLevelBPETokenizer, merges
                                 written as "a b" strings), gpt2-prefix (the
                                 same with add_prefix_space), llama3 (Llama 3's
                                 Split + ByteLevel, ignore_merges, special
                                 tokens only in tokenizer_config.json),
                                 llama3-prefix (the same with add_prefix_space,
                                 which ByteLevel applies to every Split piece),
                                 holes / holes-unk / holes-unk-fused (Llama 3's
                                 layout with no token for ' ' or 'e'; without
                                 an unk_token, with one, with fuse_unk)
  convert RANKS DIR              converts a tiktoken rank file to
                                 DIR/tokenizer.json with transformers'
                                 TikTokenConverter (how Llama 3's HF file was
                                 made), Llama 3's 256 special tokens added
  expect DIR OUT                 loads DIR as torchtitan 0.2.2's
                                 HuggingFaceTokenizer does and writes ids and
                                 decoded text of a battery of strings as JSON

The ids come from the `tokenizers` package itself; the BOS/EOS rules are
torchtitan's (components/tokenizer.py, re-typed below); the expected bytes of
decodes that cut a character come from GPT-2's byte table written out here
and are checked against the package's decode.
"""
import json
import os
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiktoken_reference import PAT, battery, llama3_special_tokens  # noqa: E402


def byte_table():
    """GPT-2's bytes_to_unicode: printable bytes stand for themselves, the
    others for U+0100 onwards in byte order."""
    printable = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


CHAR_TO_BYTE = {c: b for b, c in byte_table().items()}


def token_bytes(token):
    """What the ByteLevel decoder makes of one token string."""
    if all(c in CHAR_TO_BYTE for c in token):
        return bytes(CHAR_TO_BYTE[c] for c in token)
    return token.encode("utf-8")


def documents(text_path):
    with open(text_path, encoding="utf-8", newline="") as f:
        return f.read().split("\n")


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)


def cmd_make(kind, text_path, vocab_size, out_dir):
    from tokenizers import ByteLevelBPETokenizer

    os.makedirs(out_dir, exist_ok=True)
    vocab_size = int(vocab_size)
    docs = documents(text_path)
    path = os.path.join(out_dir, "tokenizer.json")
    if kind in ("gpt2", "gpt2-prefix"):
        specials = ["<|endoftext|>"] if kind == "gpt2" else ["<s>", "</s>"]
        tok = ByteLevelBPETokenizer(add_prefix_space=(kind == "gpt2-prefix"))
        tok.train_from_iterator(docs, vocab_size=vocab_size, min_frequency=1, special_tokens=specials)
        tok.add_tokens([AddedToken("<tool>", special=False, normalized=True)])
        tok.save(path)
        if kind == "gpt2":
            # The older merges spelling, "a b": both must load alike.
            j = json.load(open(path, encoding="utf-8"))
            j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
            write_json(path, j)
            # GPT-2's own config names one token twice: torchtitan then has a
            # BOS and no EOS (its if/elif), which titan must reproduce.
            config = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}
        else:
            config = {"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False, "normalized": True,
                                    "rstrip": False, "single_word": False},
                      "eos_token": "</s>", "pad_token": "<pad>", "unk_token": None}
    elif kind in ("llama3", "llama3-prefix"):
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(PAT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=(kind == "llama3-prefix"), use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(docs, trainer=trainer)
        tok.add_special_tokens(["<|endoftext|>"])
        tok.save(path)
        # Llama 3.1's layout: the specials live in tokenizer_config.json's
        # added_tokens_decoder, under ids this vocabulary does not reach.
        n = tok.get_vocab_size()
        names = llama3_special_tokens(16)
        config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                  "added_tokens_decoder": {str(n + 100 + i): {"content": t, "lstrip": False, "normalized": False,
                                                              "rstrip": False, "single_word": False, "special": True}
                                           for i, t in enumerate(names)}}
    elif kind in ("holes", "holes-unk", "holes-unk-fused"):
        # A vocabulary with holes, as torchtitan's own small test tokenizer
        # has: trained without the full byte alphabet on text with no spaces
        # and no 'e', so neither byte has a token. The package drops such a
        # byte (the bytes around it then merge as neighbours) or, with an
        # unk_token, writes that instead (one per byte, or one per run with
        # fuse_unk).
        unk = {"holes": None, "holes-unk": "<unk>", "holes-unk-fused": "<unk>"}[kind]
        tok = Tokenizer(models.BPE(unk_token=unk, fuse_unk=(kind == "holes-unk-fused")))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(PAT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, show_progress=False,
                                      special_tokens=[unk] if unk else [])
        tok.train_from_iterator((d.replace(" ", "").replace("e", "") for d in docs), trainer=trainer)
        tok.add_special_tokens(["<|endoftext|>"])
        tok.save(path)
        vocab = tok.get_vocab()
        assert "\u0120" not in vocab and "e" not in vocab, "the fixture has no holes"
        config = {"eos_token": "<|endoftext|>"}
    else:
        raise SystemExit(f"unknown kind {kind}")
    write_json(os.path.join(out_dir, "tokenizer_config.json"), config)


def cmd_convert(ranks_path, out_dir):
    from transformers.convert_slow_tokenizer import TikTokenConverter

    os.makedirs(out_dir, exist_ok=True)
    tok = TikTokenConverter(vocab_file=ranks_path, extra_special_tokens=llama3_special_tokens()).converted()
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    write_json(os.path.join(out_dir, "tokenizer_config.json"),
               {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"})


class TorchtitanTokenizer:
    """torchtitan 0.2.2's HuggingFaceTokenizer, the parts that decide ids."""

    STANDARD_KEYS = ["bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token", "mask_token"]

    def __init__(self, folder):
        self.tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        config_path = os.path.join(folder, "tokenizer_config.json")
        self.config = json.load(open(config_path)) if os.path.exists(config_path) else None
        self.bos_token = self.eos_token = self.bos_id = self.eos_id = None
        if self.config:
            self.add_config_tokens()
        empty = self.tok.encode("").ids
        self.hf_adds_bos = self.bos_id is not None and self.bos_id in empty
        self.hf_adds_eos = self.eos_id is not None and self.eos_id in empty

    def content(self, key):
        v = self.config.get(key)
        return v["content"] if isinstance(v, dict) else v

    def added_token(self, text, conf):
        if text == self.content("bos_token"):
            self.bos_token = text
        elif text == self.content("eos_token"):
            self.eos_token = text
        if isinstance(conf, dict) and (conf.get("__type") == "AddedToken" or "content" in conf):
            return AddedToken(text, single_word=conf.get("single_word", False), lstrip=conf.get("lstrip", False),
                              rstrip=conf.get("rstrip", False), normalized=conf.get("normalized", True),
                              special=conf.get("special", True))
        return AddedToken(text, special=True)

    def add_config_tokens(self):
        todo = [self.added_token(self.content(k), self.config[k]) for k in self.STANDARD_KEYS
                if self.config.get(k) is not None]
        for _, conf in self.config.get("added_tokens_decoder", {}).items():
            if isinstance(conf, dict) and "content" in conf:
                todo.append(self.added_token(conf["content"], conf))
        if todo:
            self.tok.add_special_tokens(todo)
        self.bos_id = self.tok.token_to_id(self.bos_token) if self.bos_token else None
        self.eos_id = self.tok.token_to_id(self.eos_token) if self.eos_token else None

    def document(self, text):
        """encode(text, add_bos=True, add_eos=True): what its datasets call."""
        ids = self.tok.encode(text).ids
        if not self.hf_adds_bos and self.bos_id is not None:
            ids.insert(0, self.bos_id)
        if not self.hf_adds_eos and self.eos_id is not None:
            ids.append(self.eos_id)
        return ids


def texts():
    extra = ["<|endoftext|>", "a<|endoftext|>b", "<tool>call</tool>", "x<tool><|endoftext|>", " <s> x </s>",
             "<s></s><s>", "<pad>", "<|begin_of_text|><|begin_of_text|>", "hello", " hello", "\nhello",
             "two  spaces", "<|end_of_text|> after", "1234567890 123", "I'M HE'S they'RE 'll 'LL"]
    return battery() + extra


def cmd_expect(folder, out):
    tt = TorchtitanTokenizer(folder)
    tok = tt.tok
    cases = []
    for text in texts():
        special = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        plain = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        case = {"text": text, "special": special, "plain": plain, "document": tt.document(text),
                "decoded": tok.decode(special, skip_special_tokens=False),
                "decoded_plain": tok.decode(plain, skip_special_tokens=False)}
        # The bytes behind each decode (titan's decode returns bytes): the
        # package's text is them read as UTF-8 with U+FFFD for what is not,
        # which happens when a vocabulary with holes dropped part of a
        # character.
        for key, ids in (("decoded", special), ("decoded_plain", plain)):
            data = b"".join(token_bytes(tok.id_to_token(i)) for i in ids)
            assert case[key] == data.decode("utf-8", "replace"), (text, key)
            case[key + "_hex"] = data.hex()
        cases.append(case)
    # Decodes that cut characters: bytes, checked against the package's
    # decode (which replaces what is not UTF-8 with U+FFFD).
    cuts = []
    for text in ["😀 café 東京", "👨‍👩‍👧‍👦 x", "naïve résumé", "한국어"]:
        ids = tok.encode(text, add_special_tokens=False).ids
        for k in range(1, len(ids) + 1):
            data = b"".join(token_bytes(tok.id_to_token(i)) for i in ids[:k])
            assert tok.decode(ids[:k], skip_special_tokens=False) == data.decode("utf-8", "replace"), (text, k)
            cuts.append({"ids": ids[:k], "hex": data.hex()})
    vocab = tok.get_vocab(with_added_tokens=True)
    added = {t.content: i for i, t in tok.get_added_tokens_decoder().items()}
    write_json(out, {"cases": cases, "cuts": cuts, "max_id": max(vocab.values()), "vocab_size": tok.get_vocab_size(),
                     "bos_id": tt.bos_id, "eos_id": tt.eos_id, "added": added})


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    {"make": cmd_make, "convert": cmd_convert, "expect": cmd_expect}[cmd](*args)
