"""Safetensors shard writer in the released K3 layout (docs/model.md, "Checkpoint files").

Layout rules it enforces: tensors ordered F32, then BF16, then U8, names sorted as strings
inside each dtype group; compact JSON header without __metadata__, padded with spaces to a
multiple of 8; data_offsets relative to the start of the data section. Deliberately
independent from the reference's reader so that each checks the other.
"""
import json
import struct

import numpy as np

# Serializer order of the release: dtype groups by element size, largest first.
DTYPE_ORDER = {"F32": 0, "BF16": 1, "U8": 2}
DTYPE_SIZE = {"F32": 4, "BF16": 2, "U8": 1}


def f64_to_bf16_bits(x):
    """Round float values to bf16 (round to nearest even) and return the uint16 bit patterns."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    # Round to nearest even on the 16 dropped bits; no NaN/inf can occur in generated weights.
    rounding = 0x7FFF + ((u >> 16) & 1)
    return ((u + rounding) >> 16).astype(np.uint16)


def bf16_bits_to_f64(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


class Tensor:
    """One tensor to write: name, dtype tag, shape and a callable or array giving raw bytes."""

    def __init__(self, name, dtype, shape, payload):
        if dtype not in DTYPE_ORDER:
            raise ValueError(f"unsupported dtype {dtype} for {name}")
        self.name = name
        self.dtype = dtype
        self.shape = [int(s) for s in shape]
        self.payload = payload  # numpy array of the exact element type, or a callable yielding chunks

    @property
    def nbytes(self):
        n = DTYPE_SIZE[self.dtype]
        for s in self.shape:
            n *= s
        return n

    def chunks(self):
        """Yield the raw data as contiguous numpy arrays of the exact element type."""
        want = {"F32": np.dtype("<f4"), "BF16": np.dtype("<u2"), "U8": np.dtype("u1")}[self.dtype]
        parts = self.payload() if callable(self.payload) else [self.payload]
        total = 0
        for a in parts:
            a = np.ascontiguousarray(a)
            if a.dtype != want:
                raise ValueError(f"{self.name}: payload dtype {a.dtype} does not match {self.dtype}")
            total += a.nbytes
            yield a
        if total != self.nbytes:
            raise ValueError(f"{self.name}: payload has {total} bytes, shape needs {self.nbytes}")


def layout_order(tensors):
    return sorted(tensors, key=lambda t: (DTYPE_ORDER[t.dtype], t.name))


def write_shard(path, tensors, progress=None):
    """Write one shard; returns the number of tensor data bytes written."""
    ordered = layout_order(tensors)
    header = {}
    offset = 0
    for t in ordered:
        header[t.name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for t in ordered:
            for a in t.chunks():
                f.write(memoryview(a.reshape(-1).view(np.uint8)))
            if progress:
                progress(t)
    return offset
