"""Helpers for the expert manifest and trunk-only tests: where a routed expert's bytes sit in
the shards, read from the safetensors headers with this file's own parser (not the engine's),
a way to alter them on a server's copy, and the standalone ids the runs must give.
"""
import json
import os
import re
import struct
import subprocess

EXPERT = re.compile(r"\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.w[123]\.weight_(packed|scale)$")


def shard_tensors(path):
    """{name: (absolute begin, absolute end)} of one safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return {k: (8 + n + v["data_offsets"][0], 8 + n + v["data_offsets"][1]) for k, v in header.items()}


def expert_ranges(model):
    """{(layer, expert): (shard file name, begin, end)}: the six tensors' span (contiguous)."""
    with open(os.path.join(model, "model.safetensors.index.json")) as f:
        index = json.load(f)["weight_map"]
    out = {}
    for shard in sorted(set(index.values())):
        for name, (b, e) in shard_tensors(os.path.join(model, shard)).items():
            m = EXPERT.search(name)
            if not m:
                continue
            key = (int(m.group(1)), int(m.group(2)))
            f, b0, e0 = out.get(key, (shard, b, e))
            assert f == shard, "an expert split across shards"
            out[key] = (shard, min(b0, b), max(e0, e))
    return out


def standalone_ids(bin_dir, model, ids, gen, timeout):
    """The ids of `k3-compute --standalone` (one process, local reads): what every run must give."""
    r = subprocess.run([os.path.join(bin_dir, "k3-compute"), "--standalone", model, "--ids", ids, "--gen", str(gen),
                        "--threads", "1"], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.split()]


def xor_expert(model, layer, expert, offset=16, count=8):
    """XORs `count` bytes of expert (layer, expert) at `offset` into its span, in place."""
    shard, b, e = expert_ranges(model)[(layer, expert)]
    assert b + offset + count <= e
    with open(os.path.join(model, shard), "r+b") as f:
        f.seek(b + offset)
        x = f.read(count)
        f.seek(b + offset)
        f.write(bytes(v ^ 0xA5 for v in x))
