#!/usr/bin/python3
"""Builds a test tokenizer directory from the tiktoken npm package's o200k_base ranks.

    make_vocab.py NODE_MODULES_DIR OUT_DIR

Writes OUT_DIR/tiktoken.model ("base64 rank" per line, the K3 release format),
OUT_DIR/tokenizer_config.json (256 added tokens with the K3 names, placed right after the
last rank as K3 places them after its 163,584 ranks) and OUT_DIR/specials.json (content ->
id, for the reference harness). Generated at test time; never committed.
"""
import json
import os
import sys

# K3's added tokens by offset from the first added id (as in the released K3
# tokenizer_config.json); the rest are
# reserved names.
K3_ADDED = {0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>",
            5: "<|sep|>", 18: "<|media_begin|>", 19: "<|media_content|>", 20: "<|media_end|>",
            21: "<|media_pad|>", 254: "[UNK]", 255: "[PAD]"}


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_vocab.py NODE_MODULES_DIR OUT_DIR")
    src = os.path.join(sys.argv[1], "tiktoken", "encoders", "o200k_base.json")
    with open(src, encoding="utf-8") as f:
        enc = json.load(f)
    # The package stores ranks as lines "! FIRST_RANK b64 b64 ..." with consecutive ranks.
    ranks = {}
    for line in enc["bpe_ranks"].split("\n"):
        if not line:
            continue
        parts = line.split(" ")
        start = int(parts[1])
        for i, tok in enumerate(parts[2:]):
            ranks[start + i] = tok
    n = len(ranks)
    if sorted(ranks) != list(range(n)):
        sys.exit("make_vocab.py: o200k ranks are not contiguous")
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tiktoken.model"), "w", encoding="ascii", newline="\n") as f:
        for r in range(n):
            f.write(f"{ranks[r]} {r}\n")
    added = {}
    for k in range(256):
        name = K3_ADDED.get(k, f"<|reserved_token_{k}|>")
        added[str(n + k)] = {"content": name, "lstrip": False, "normalized": False,
                             "rstrip": False, "single_word": False, "special": True}
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"added_tokens_decoder": added, "bos_token": "[BOS]", "eos_token": "[EOS]"}, f, indent=1)
    with open(os.path.join(out, "specials.json"), "w", encoding="utf-8") as f:
        json.dump({v["content"]: int(k) for k, v in added.items()}, f)
    print(f"make_vocab.py: {n} ranks + 256 added tokens -> {out}")


if __name__ == "__main__":
    main()
