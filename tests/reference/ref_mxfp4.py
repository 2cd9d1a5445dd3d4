"""MXFP4 decoder (docs/model.md, "MXFP4 experts"): E2M1 nibbles, low nibble = even element, E8M0 group scales."""
import numpy as np

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def e8m0(s):
    """Scale bytes to float64: 2^(s-127); 255 is NaN by the OCP spec."""
    s = np.asarray(s, dtype=np.int64)
    v = np.ldexp(1.0, s - 127)
    return np.where(s == 255, np.nan, v)


def dequantize(packed, scales, group=32):
    """packed u8 [R, C/2], scales u8 [R, C/group] -> float64 [R, C] (exact)."""
    packed = np.asarray(packed, dtype=np.uint8)
    R, half = packed.shape
    C = half * 2
    vals = np.empty((R, C))
    vals[:, 0::2] = E2M1[packed & 0x0F]
    vals[:, 1::2] = E2M1[packed >> 4]
    sc = e8m0(scales)
    if sc.shape != (R, C // group):
        raise ValueError(f"scale shape {sc.shape} does not match packed {packed.shape}")
    return vals * np.repeat(sc, group, axis=1)
