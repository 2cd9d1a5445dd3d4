#!/usr/bin/env python3
"""The entropy bound of a checkpoint's trunk bytes, against its coded trunk (docs/formats.md
"Coded trunk"; results in tests/bench/results/).

    trunk_entropy.py MODEL_DIR [CODED_DIR]

For every non-expert tensor: a BF16 tensor costs, per value, the order-0 entropy of its high
bytes plus that of its low bytes (the bound of any code that treats the two byte planes
separately with one table per tensor, as bf16-hi3-esc4 does), and a finer bound that also lets
the low byte's top bit (the last exponent bit) depend on the high byte: H(high, top bit) + 7.
Other tensors count at their size. Prints both bounds as a fraction of the trunk's bytes and,
with CODED_DIR, the coded trunk's size from its manifest.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from ref_safetensors import read_header  # noqa: E402


def entropy_bits(counts):
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())


def main(model, coded=None):
    total = plane_bound = fine_bound = 0.0
    bf16_bytes = 0
    for name in sorted(f for f in os.listdir(model) if f.endswith(".safetensors")):
        path = os.path.join(model, name)
        entries, start, _ = read_header(path)
        data = np.memmap(path, dtype=np.uint8, mode="r")
        for t, (dtype, shape, b, e) in entries.items():
            if ".experts." in t or e == b:
                continue
            n = e - b
            total += n
            if dtype != "BF16":
                plane_bound += n
                fine_bound += n
                continue
            bf16_bytes += n
            counts = np.zeros((2, 512), np.int64)  # [high byte, low byte] and [high byte x last exponent bit]
            raw = data[start + b:start + e]
            step = 1 << 25  # bytes per block: bounded memory on multi-GB tensors
            for at in range(0, n, step):
                blk = raw[at:at + step]
                hi, lo = blk[1::2], blk[0::2]
                counts[0, :256] += np.bincount(hi, minlength=256)
                counts[0, 256:] += np.bincount(lo, minlength=256)
                counts[1] += np.bincount(hi.astype(np.uint16) * 2 + (lo >> 7), minlength=512)
            values = n // 2
            plane_bound += values * (entropy_bits(counts[0, :256]) + entropy_bits(counts[0, 256:])) / 8
            fine_bound += values * (entropy_bits(counts[1]) + 7) / 8
    print(f"{model}: trunk {total / 1e6:.1f} MB ({bf16_bytes / total:.4f} of it BF16)")
    print(f"  byte-plane entropy bound (per tensor):  {plane_bound / total:.4f}x")
    print(f"  with the last exponent bit conditioned: {fine_bound / total:.4f}x")
    if coded:
        with open(os.path.join(coded, "k3-coded-trunk.json")) as f:
            m = json.load(f)
        c = sum(r["coded_bytes"] for r in m["runs"])
        s = sum(r["end"] - r["begin"] for r in m["runs"])
        print(f"  coded trunk (bf16-hi3-esc4):            {c / s:.4f}x ({c / 1e6:.1f} MB of {s / 1e6:.1f} MB, "
              f"{c / plane_bound:.4f}x the byte-plane bound)")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(*sys.argv[1:])
