#!/usr/bin/env python3
"""Byte-level BPE trainer and encoder in tiktoken rank format, with the Kimi split pattern.

    bpe_train.py OUT_DIR [--ranks 4096]

Writes OUT_DIR/tiktoken.model (one "base64(bytes) rank" line per token, ranks 0..N-1; rank b
< 256 is the single byte b) and OUT_DIR/tokenizer_config.json (the 256 K3 special tokens at
ids N..N+255 with their K3 names). Merges are learned greedily by pair frequency over the
pre-split chunks of the training text; a merged token's rank is 256 + its merge order, so
encoding by "merge the adjacent pair of lowest rank" (tiktoken) replays the learned order.
"""
import argparse
import base64
import collections
import json
import os
import re
import sys

try:
    import regex  # Debian python3-regex: \p{..} classes and set intersection (V1)
except ImportError:  # pragma: no cover - the ASCII fallback below is exact on ASCII text
    regex = None

# Kimi pat_str (docs/model.md, "Tokenizer and special ids"): alternatives H, A, B, C, D, E, F, G in order.
_LU = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]"
_LL = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]"
_CONTR = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
KIMI_PATTERN = "|".join([
    r"[\p{Han}]+",
    r"[^\r\n\p{L}\p{N}]?" + _LU + "*" + _LL + "+" + _CONTR,
    r"[^\r\n\p{L}\p{N}]?" + _LU + "+" + _LL + "*" + _CONTR,
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
# The same pattern restricted to ASCII input (no Han, letters are A-Z/a-z, \s spelled out so
# Python's re does not also treat \x1c-\x1f as whitespace).
_S = r"[ \t\n\v\f\r]"
_NS = r"[^ \t\n\v\f\r]"
ASCII_PATTERN = "|".join([
    r"[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+" + _CONTR,
    r"[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*" + _CONTR,
    r"[0-9]{1,3}",
    r" ?[^ \t\n\v\f\rA-Za-z0-9]+[\r\n]*",
    _S + r"*[\r\n]+",
    _S + r"+(?!" + _NS + ")",
    _S + r"+",
])

SPECIAL_NAMES = {0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
                 18: "<|media_begin|>", 19: "<|media_content|>", 20: "<|media_end|>", 21: "<|media_pad|>",
                 254: "[UNK]", 255: "[PAD]"}


def special_tokens(n_ranks):
    """{id: name} for the 256 specials that follow the ranks, as in the release (docs/model.md, "Tokenizer and special ids")."""
    return {n_ranks + k: SPECIAL_NAMES.get(k, f"<|reserved_token_{k}|>") for k in range(256)}


_compiled = {}


def pre_split(text):
    """Split text into chunks with the Kimi pattern (regex module, or the exact ASCII form)."""
    if regex is not None:
        if "kimi" not in _compiled:
            _compiled["kimi"] = regex.compile(KIMI_PATTERN, flags=regex.V1)
        return _compiled["kimi"].findall(text)
    if not text.isascii():
        raise SystemExit("bpe: non-ASCII text needs the python3-regex package")
    if "ascii" not in _compiled:
        _compiled["ascii"] = re.compile(ASCII_PATTERN)
    return _compiled["ascii"].findall(text)


def train(text, n_ranks, log=print):
    """Returns the list of token byte strings; index = rank."""
    counts = collections.Counter(pre_split(text))
    words = [list(w.encode("utf-8")) for w in counts]
    freq = list(counts.values())
    vocab = [bytes([b]) for b in range(256)]
    rank_of = {t: i for i, t in enumerate(vocab)}
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pairs[(a, b)] += freq[wi]
            where[(a, b)].add(wi)
    while len(vocab) < n_ranks and pairs:
        # Most frequent pair; ties broken by the smaller ranks so training is deterministic.
        (a, b), c = max(pairs.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]))
        if c <= 0:
            break
        new_bytes = vocab[a] + vocab[b]
        if new_bytes in rank_of:  # same bytes already reachable through another split
            new = rank_of[new_bytes]
        else:
            new = len(vocab)
            vocab.append(new_bytes)
            rank_of[new_bytes] = new
        for wi in list(where[(a, b)]):
            w, f = words[wi], freq[wi]
            for p in zip(w, w[1:]):
                pairs[p] -= f
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for p in zip(out, out[1:]):
                pairs[p] += f
                where[p].add(wi)
        del pairs[(a, b)]
        where.pop((a, b), None)
        if len(vocab) % 512 == 0:
            log(f"bpe: {len(vocab)} ranks, last merge {new_bytes!r} x{c}")
    return vocab


def write_files(out_dir, vocab):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tiktoken.model"), "w") as f:
        for r, t in enumerate(vocab):
            f.write(f"{base64.b64encode(t).decode('ascii')} {r}\n")
    added = {str(i): {"content": name, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True}
             for i, name in special_tokens(len(vocab)).items()}
    n = len(vocab)
    cfg = {"added_tokens_decoder": added, "bos_token": "[BOS]", "eos_token": "[EOS]",
           "pad_token": "[PAD]", "unk_token": "[UNK]", "model_max_length": 1048576,
           "tokenizer_class": "TikTokenTokenizer", "bos_token_id": n, "eos_token_id": n + 1}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


class Tokenizer:
    """Rank-based BPE encoder/decoder over a tiktoken.model file (plain text only, no specials)."""

    def __init__(self, model_dir):
        self.ranks = {}
        with open(os.path.join(model_dir, "tiktoken.model")) as f:
            for line in f:
                if line.strip():
                    tok, r = line.split()
                    self.ranks[base64.b64decode(tok)] = int(r)
        self.by_rank = {r: t for t, r in self.ranks.items()}
        self.specials = special_tokens(len(self.ranks))
        self._cache = {}

    def _bpe(self, piece):
        if piece in self.ranks:
            return [self.ranks[piece]]
        parts = [bytes([b]) for b in piece]
        while len(parts) > 1:
            best, at = None, -1
            for i in range(len(parts) - 1):
                r = self.ranks.get(parts[i] + parts[i + 1])
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        return [self.ranks[p] for p in parts]

    def encode(self, text):
        ids = []
        for chunk in pre_split(text):
            if chunk not in self._cache:
                self._cache[chunk] = self._bpe(chunk.encode("utf-8"))
            ids += self._cache[chunk]
        return ids

    def decode(self, ids):
        out = b""
        for i in ids:
            out += self.by_rank[i] if i in self.by_rank else self.specials.get(i, "").encode()
        return out.decode("utf-8", errors="replace")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--ranks", type=int, default=4096)
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import corpus
    train_text, _ = corpus.split_text()
    if regex is not None:  # the two splitters must agree on this (ASCII) corpus
        _compiled["ascii"] = re.compile(ASCII_PATTERN)
        if _compiled["ascii"].findall(train_text) != pre_split(train_text):
            raise SystemExit("bpe: ASCII fallback splitter disagrees with the Kimi pattern")
    vocab = train(train_text, args.ranks)
    write_files(args.out_dir, vocab)
    print(f"bpe: wrote {len(vocab)} ranks + 256 specials to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
