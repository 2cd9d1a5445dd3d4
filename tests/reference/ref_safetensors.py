"""Read-only safetensors access for the reference: one file or index + shards.

Written independently of the generator's writer. Values come back as float64 (F32/BF16/F16)
or as raw uint8 (U8); offsets are always taken from the headers, never computed.
"""
import json
import os
import struct

import numpy as np

_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "I8": 1, "BOOL": 1}


def read_header(path):
    """Return (entries {name: (dtype, shape, begin, end)}, data_start, ordered names)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)
        if n > size - 8:
            raise ValueError(f"{path}: header length {n} exceeds the file")
        text = f.read(n)
    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise ValueError(f"{path}: duplicate keys in the header")
        return dict(pairs)

    header = json.loads(text.decode("utf-8"), object_pairs_hook=no_duplicates)
    names = list(header)  # dicts keep the file's order
    entries = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dt, shape, (b, end) = e["dtype"], e["shape"], e["data_offsets"]
        nbytes = _SIZES[dt] * int(np.prod(shape, dtype=np.int64))
        if end - b != nbytes or b < 0 or 8 + n + end > size:
            raise ValueError(f"{path}: {name} has inconsistent data_offsets")
        entries[name] = (dt, list(shape), b, end)
    return entries, 8 + n, [k for k in names if k != "__metadata__"]


class Checkpoint:
    def __init__(self, model_dir):
        self.dir = model_dir
        index = os.path.join(model_dir, "model.safetensors.index.json")
        self.where = {}
        self.headers = {}
        if os.path.exists(index):
            with open(index) as f:
                wm = json.load(f)["weight_map"]
            shards = sorted(set(wm.values()))
        else:
            wm, shards = None, ["model.safetensors"]
        for s in shards:
            if "/" in s or s.startswith(".."):
                raise ValueError(f"bad shard name {s!r}")
            entries, start, _ = read_header(os.path.join(model_dir, s))
            self.headers[s] = (entries, start)
            for name in entries:
                if wm is None or wm.get(name) == s:
                    self.where[name] = s
        if wm is not None:
            missing = [k for k, s in wm.items() if self.where.get(k) != s]
            if missing:
                raise ValueError(f"index names tensors missing from their shard: {missing[:3]}")
        self._maps = {}

    def __contains__(self, name):
        return name in self.where

    def names(self):
        return sorted(self.where)

    def _raw(self, name):
        s = self.where[name]
        entries, start = self.headers[s]
        dt, shape, b, e = entries[name]
        if s not in self._maps:
            self._maps[s] = np.memmap(os.path.join(self.dir, s), dtype=np.uint8, mode="r")
        return dt, shape, self._maps[s][start + b:start + e]

    def dtype(self, name):
        return self._raw(name)[0]

    def shape(self, name):
        return self._raw(name)[1]

    def get(self, name):
        """float64 array for float tensors, uint8 array for U8 tensors."""
        dt, shape, buf = self._raw(name)
        return _widen(name, dt, np.asarray(buf)).reshape(shape)

    def rows(self, name, index):
        """Rows `index` (a slice or an integer array) of a 2-D tensor, widened like get().
        Only those rows' bytes are touched: the shard stays mapped, nothing else is read."""
        dt, shape, buf = self._raw(name)
        if len(shape) != 2:
            raise ValueError(f"{name}: rows() needs a 2-D tensor, shape is {shape}")
        grid = np.asarray(buf).reshape(shape[0], shape[1] * _SIZES[dt])
        picked = grid[index]
        return _widen(name, dt, picked.reshape(-1)).reshape(picked.shape[0], shape[1])


def _widen(name, dt, b):
    """Raw little-endian bytes (1-D uint8) -> float64 values, or a uint8 copy for U8."""
    if dt == "F32":
        return b.view("<f4").astype(np.float64)
    if dt == "F64":
        return b.view("<f8").astype(np.float64)
    if dt == "F16":
        return b.view("<f2").astype(np.float64)
    if dt == "BF16":
        # bf16 is the top half of an fp32: widening is an exact 16-bit shift.
        return (b.view("<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dt == "U8":
        return b.copy()
    raise ValueError(f"{name}: dtype {dt} not used by K3")
