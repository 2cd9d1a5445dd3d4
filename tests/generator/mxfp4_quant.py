"""MXFP4 quantiser for test checkpoints (docs/model.md, "MXFP4 experts").

Per group of 32 along the input dimension: exponent e = floor(log2(amax)) - 2, elements
rounded to the nearest E2M1 value of x / 2^e (saturating at +-6), scale stored as the E8M0
byte e + 127. Byte j of a packed row holds element 2j in the low nibble, 2j+1 in the high one.
"""
import numpy as np

GROUP = 32
E2M1_MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def quantize(w):
    """w: float array [rows, cols], cols % 32 == 0. Returns (packed u8 [rows, cols/2], scales u8 [rows, cols/32])."""
    w = np.asarray(w, dtype=np.float64)
    rows, cols = w.shape
    if cols % GROUP:
        raise ValueError(f"MXFP4 needs the input width to be a multiple of {GROUP}, got {cols}")
    g = w.reshape(rows, cols // GROUP, GROUP).copy()
    amax = np.abs(g).max(axis=2)
    # An all-zero group has no exponent; nudge its first element so every group gets a real scale.
    zero = amax == 0
    if zero.any():
        g[zero, 0] = 1e-3
        amax = np.abs(g).max(axis=2)
    e = np.floor(np.log2(amax)).astype(np.int64) - 2
    if (e + 127 < 0).any() or (e + 127 > 254).any():
        raise ValueError("MXFP4 exponent out of E8M0 range")
    scaled = g / np.ldexp(1.0, e)[..., None]
    mag = np.minimum(np.abs(scaled), 6.0)
    # Nearest table entry; ties go to the smaller magnitude (argmin keeps the first).
    idx = np.abs(mag[..., None] - E2M1_MAGNITUDES).argmin(axis=-1)
    codes = (idx | np.where(scaled < 0, 8, 0)).astype(np.uint8).reshape(rows, cols)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    scales = (e + 127).astype(np.uint8)
    return packed, scales
