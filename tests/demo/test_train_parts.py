#!/usr/bin/env python3
"""Checks of the demo training code's shortcuts (needs python3-torch; exit 77, ctest's Skipped,
without it; scripts/test.sh installs it).

- kda_chunked (the chunked delta rule used for training) equals the token-by-token recurrence;
- mxfp4_fake (QAT) rounds exactly like the generator's MXFP4 quantiser, so the trained
  experts are written without further loss;
- the Python BPE encoder keeps the Kimi split and round-trips text.
"""
import os
import sys
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "train"))
sys.path.insert(0, os.path.join(ROOT, "tests", "generator"))
sys.path.insert(0, os.path.join(ROOT, "tests", "pipeline"))
from proc_util import main, require  # noqa: E402
try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


class TrainParts(unittest.TestCase):
    def test_kda_chunked_equals_recurrence(self):
        import k3_torch
        g = torch.Generator().manual_seed(3)
        B, H, T, D = 2, 3, 45, 8  # T not a multiple of the chunk
        q = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
        k = k3_torch.l2(torch.randn(B, H, T, D, generator=g, dtype=torch.float64))
        v = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
        for scale in (0.1, 3.0):  # gentle and near-maximal decay (g down to -5 per step)
            lg = -5 * torch.sigmoid(torch.randn(B, H, T, D, generator=g, dtype=torch.float64) * 3 + scale)
            beta = torch.rand(B, H, T, generator=g, dtype=torch.float64)
            want = k3_torch.kda_naive(q, k, v, lg, beta)
            got = k3_torch.kda_chunked(q, k, v, lg, beta, chunk=16)
            self.assertLess((got - want).abs().max().item(), 1e-10)
        # The all-minimum gate in float32 stays finite and accurate (exp factors bounded by e^40).
        lg = torch.full((B, H, T, D), -5.0, dtype=torch.float64)
        got = k3_torch.kda_chunked(q.float(), k.float(), v.float(), lg.float(), beta.float())
        want = k3_torch.kda_naive(q, k, v, lg, beta)
        self.assertLess((got.double() - want).abs().max().item(), 1e-4)

    def test_mxfp4_fake_equals_written_values(self):
        import k3_torch
        import mxfp4_quant
        rng = np.random.default_rng(5)
        w = rng.standard_normal((16, 96)) * np.exp(rng.uniform(-3, 3, (16, 1)))
        w[0, :32] = np.array([6.0, 5.0, 7.0, -7.9, 2.5, 0.25] + [0.0] * 26)  # ties and saturation
        packed, scales = mxfp4_quant.quantize(w)
        table = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
        codes = np.empty(w.shape, dtype=np.int64)
        codes[:, 0::2], codes[:, 1::2] = packed & 15, packed >> 4
        written = table[codes] * np.repeat(np.ldexp(1.0, scales.astype(np.int64) - 127), 32, axis=1)
        fake = k3_torch.mxfp4_fake(torch.from_numpy(w)).numpy()
        np.testing.assert_array_equal(fake, written)

    def test_bpe_round_trip(self):
        import bpe_train
        tok = bpe_train.Tokenizer(os.path.join(ROOT, "models", "k3-demo-tiny"))
        text = "Don't PANIC!!  It's 1234567 o'clock\n\n\tYOU'LL see.\n"
        ids = tok.encode(text)
        self.assertEqual(tok.decode(ids), text)
        self.assertEqual(bpe_train.pre_split("I'm OK 2024x"), ["I'm", " OK", " ", "202", "4", "x"])


if __name__ == "__main__":
    require(torch is not None, "python3-torch not installed (scripts/install-deps.sh --tests installs it)")
    main()
