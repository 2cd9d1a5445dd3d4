"""Decoder of the coded trunk (docs/formats.md, "Coded trunk"), written from that page alone.

    ref_coded_trunk.py CODED_DIR MODEL_DIR

Reads k3-coded-trunk.json and k3-coded-trunk.bin, decodes every run with numpy, and checks it
against the release: the bytes [begin, end) of the named shard of MODEL_DIR, the manifest's
digests of both, the header, and that the runs cover every non-expert tensor of the shards.
Prints one line per finding; exit 0 when everything matches, 1 otherwise. Also importable
(decode_run, chunked_sha256) by the pipeline tests.
"""
import hashlib
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_safetensors import read_header  # noqa: E402


def chunked_sha256(b):
    """SHA-256 of the SHA-256s of each 4 MiB chunk ("sha256-chunks")."""
    step = 4 << 20
    return hashlib.sha256(b"".join(hashlib.sha256(b[i:i + step]).digest() for i in range(0, len(b), step))).hexdigest()


def decode_frame(buf):
    """(decoded bytes, coded size) of the frame at the start of buf."""
    kind, pad, count = buf[0], bytes(buf[1:4]), struct.unpack_from("<I", buf, 4)[0]
    assert pad == b"\0\0\0", "frame padding"
    if kind == 0:
        assert 1 <= count <= 65536
        return bytes(buf[8:8 + count]), 8 + count
    assert kind == 1, f"frame kind {kind}"
    n = count
    assert 1 <= n <= 32768
    table = np.frombuffer(bytes(buf[8:16]), np.uint8)
    esc_table = np.frombuffer(bytes(buf[16:32]), np.uint8)
    E, R = struct.unpack_from("<II", buf, 32)
    assert table[7] == 0 and esc_table[15] == 0 and R <= E <= n
    G = (n + 31) // 32
    groups = np.frombuffer(bytes(buf[40:40 + 44 * G]), np.uint8).reshape(G, 44)
    planes = groups[:, :12].copy().view("<u4").reshape(G, 3)
    low = groups[:, 12:].reshape(-1)
    bit = (np.arange(32, dtype=np.uint32))[None, :]
    idx = sum((((planes[:, k:k + 1] >> bit) & 1) << k) for k in range(3)).reshape(-1).astype(np.int64)
    assert not idx[n:].any() and not low[n:].any(), "non-zero padding in the last group"
    idx, low = idx[:n], low[:n]
    at = 40 + 44 * G
    nib_bytes = np.frombuffer(bytes(buf[at:at + (E + 1) // 2]), np.uint8)
    nibbles = np.stack([nib_bytes & 15, nib_bytes >> 4], axis=1).reshape(-1)
    assert E % 2 == 0 or nibbles[E] == 0, "padding nibble"
    nibbles = nibbles[:E]
    raws = np.frombuffer(bytes(buf[at + (E + 1) // 2:at + (E + 1) // 2 + R]), np.uint8)
    assert int((nibbles == 15).sum()) == R, "raw escape count"
    esc = esc_table[np.minimum(nibbles, 15)].copy()
    esc[nibbles == 15] = raws
    high = table[np.minimum(idx, 7)].copy()
    assert int((idx == 7).sum()) == E, "escape count"
    high[idx == 7] = esc
    out = np.empty(2 * n, np.uint8)
    out[0::2], out[1::2] = low, high
    return out.tobytes(), at + (E + 1) // 2 + R


def decode_run(buf):
    """The source bytes of one coded run (exactly its coded bytes)."""
    assert bytes(buf[:4]) == b"K3CR", "run magic"
    version, N, F, zero, B = struct.unpack_from("<IQIIQ", buf, 4)
    assert version == 1 and zero == 0 and len(buf) == 32 + 16 * F + B
    entries = [struct.unpack_from("<QQ", buf, 32 + 16 * i) for i in range(F)]
    body = memoryview(buf)[32 + 16 * F:]
    out = bytearray()
    for i, (src_off, coded_off) in enumerate(entries):
        src_end = entries[i + 1][0] if i + 1 < F else N
        coded_end = entries[i + 1][1] if i + 1 < F else B
        assert src_off == len(out), "directory source offsets"
        data, size = decode_frame(body[coded_off:coded_end])
        assert size == coded_end - coded_off and len(data) == src_end - src_off, f"frame {i} size"
        out += data
    assert len(out) == N
    return bytes(out)


def check(coded_dir, model_dir):
    with open(os.path.join(coded_dir, "k3-coded-trunk.json")) as f:
        m = json.load(f)
    with open(os.path.join(coded_dir, m["file"]), "rb") as f:
        data = f.read()
    bad = []
    magic, version, runs = data[:8], *struct.unpack_from("<II", data, 8)
    pack_id, size = data[16:48].hex(), struct.unpack_from("<Q", data, 48)[0]
    if magic != b"K3TRUNKC" or version != 1 or runs != len(m["runs"]) or not size == len(data) == m["file_bytes"]:
        bad.append("header")
    shards = {}
    for s in m["shards"]:
        with open(os.path.join(model_dir, s["file"]), "rb") as f:
            shards[s["file"]] = f.read()
        if len(shards[s["file"]]) != s["bytes"]:
            bad.append(f"{s['file']}: size")
    covered = {}
    for i, r in enumerate(m["runs"]):
        coded = data[r["coded_offset"]:r["coded_offset"] + r["coded_bytes"]]
        if r["coded_offset"] % 4096 or chunked_sha256(coded) != r["coded_sha256"]:
            bad.append(f"run {i}: coded digest or alignment")
        name = m["shards"][r["shard"]]["file"]
        want = shards[name][r["begin"]:r["end"]]
        if decode_run(coded) != want:
            bad.append(f"run {i}: decodes to other bytes than {name} [{r['begin']}, {r['end']})")
        if chunked_sha256(want) != r["sha256"]:
            bad.append(f"run {i}: source digest")
        covered.setdefault(name, []).append((r["begin"], r["end"]))
    if not hashlib.sha256(b"".join(bytes.fromhex(r["sha256"]) for r in m["runs"])).hexdigest() == pack_id == m["pack_id"]:
        bad.append("pack id")
    for name in shards:
        entries, start, _ = read_header(os.path.join(model_dir, name))
        for t, (dtype, shape, b, e) in entries.items():
            if ".experts." in t or e == b:
                continue
            if not any(lo <= start + b and start + e <= hi for lo, hi in covered.get(name, [])):
                bad.append(f"{t}: not in any run")
    source = sum(r["end"] - r["begin"] for r in m["runs"])
    coded = sum(r["coded_bytes"] for r in m["runs"])
    print(f"{len(m['runs'])} runs, {coded} coded bytes for {source} trunk bytes ({coded / source:.4f}x)")
    for b in bad:
        print("MISMATCH", b)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(check(sys.argv[1], sys.argv[2]))
