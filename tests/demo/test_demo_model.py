#!/usr/bin/env python3
"""Gate for the bundled demo model models/k3-demo-tiny (docs/demo-model.md).

    /usr/bin/python3 tests/demo/test_demo_model.py [-v]      (K3_BIN_DIR: default build/bin)

- the folder is in the released layout, with the K3 special tokens right after the ranks;
- the Python tokenizer (train/bpe_train.py) and k3-tokenizer give the same ids;
- the reference (tests/reference/k3_ref.py, float64) scores held-out fortunes far better than
  a unigram model built from the committed vocabulary's training counts would allow: the
  model has learned something;
- the engine's greedy ids (k3-compute --standalone) equal the reference's for several prompts.
A missing binary is a failure, not a skip: build first, or point K3_BIN_DIR at the binaries.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "k3-demo-tiny")
BIN = os.environ.get("K3_BIN_DIR", os.path.join(ROOT, "build", "bin"))
PY = "/usr/bin/python3"
sys.path.insert(0, os.path.join(ROOT, "train"))
import bpe_train  # noqa: E402

PROMPTS = ["The meaning of life is", "A computer is", "Q: What do you get when you cross",
           "Never trust a", "Linux is"]
GEN = 12
# A held-out fortune (every 20th fortune is validation, train/corpus.py); never trained on.
HELD_OUT = ("Disks travel in packs.\n%\n"
            "Delta: We never make the same mistake three times.   -- David Letterman\n%\n"
            "Burn's Hog Weighing Method:\n\t(1) Get a perfectly symmetrical plank and balance it across a "
            "sawhorse.\n\t(2) Put the hog on one end of the plank.\n\t(3) Pile rocks on the other end until "
            "the plank is again perfectly\n\t    balanced.\n\t(4) Carefully guess the weight of the rocks.\n"
            "\t\t-- Robert Burns\n%\n")


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-400:]}")
    return p


def reference(ids, gen, extra=()):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ref.json")
        run([PY, os.path.join(ROOT, "tests", "reference", "k3_ref.py"), MODEL, "--ids", ",".join(map(str, ids)),
             "--gen", str(gen), "--out", out, *[a.replace("{tmp}", tmp) for a in extra]])
        with open(out) as f:
            rep = json.load(f)
        trace = os.path.join(tmp, "trace", "logits.f32")
        if os.path.exists(trace):
            rep["logits"] = np.fromfile(trace, dtype="<f4").reshape(len(ids), -1)
        return rep


class DemoModel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.isfile(os.path.join(MODEL, "config.json")):
            raise AssertionError(f"{MODEL} is missing: run train/train_demo.py")
        cls.tok = bpe_train.Tokenizer(MODEL)
        with open(os.path.join(MODEL, "config.json")) as f:
            cls.cfg = json.load(f)

    def test_layout_and_specials(self):
        tc = self.cfg["text_config"]
        n = len(self.tok.ranks)
        self.assertEqual(sorted(self.tok.ranks.values()), list(range(n)))
        self.assertEqual(tc["vocab_size"], n + 256)
        self.assertEqual((tc["bos_token_id"], tc["eos_token_id"], tc["pad_token_id"]), (n, n + 2, n + 255))
        with open(os.path.join(MODEL, "tokenizer_config.json")) as f:
            added = json.load(f)["added_tokens_decoder"]
        want = {0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
                18: "<|media_begin|>", 21: "<|media_pad|>", 254: "[UNK]", 255: "[PAD]", 7: "<|reserved_token_7|>"}
        self.assertEqual(len(added), 256)
        for k, name in want.items():
            self.assertEqual(added[str(n + k)]["content"], name)
            self.assertTrue(added[str(n + k)]["special"])
        la = tc["linear_attn_config"]
        self.assertEqual(la["full_attn_layers"], [4, 8, 12, 13])
        self.assertGreaterEqual(tc["num_hidden_layers"] // tc["attn_res_block_size"], 2 + 1)
        self.assertGreater(tc["num_experts_per_token"], 1)
        with open(os.path.join(MODEL, "model.safetensors.index.json")) as f:
            wm = json.load(f)["weight_map"]
        shards = sorted(set(wm.values()))
        self.assertEqual(len(shards), tc["num_hidden_layers"] + 1)
        for s in shards:
            self.assertTrue(os.path.isfile(os.path.join(MODEL, s)), s)
        self.assertIn("language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_packed", wm)

    def test_tokenizer_round_trip_and_engine_tokenizer(self):
        text = HELD_OUT + "".join(p + "\n" for p in PROMPTS)
        ids = self.tok.encode(text)
        self.assertEqual(self.tok.decode(ids), text)
        self.assertLess(len(ids), len(text) / 2.5, "the BPE vocabulary should compress English text")
        exe = os.path.join(BIN, "k3-tokenizer")
        if not os.path.exists(exe):
            self.fail(f"{exe} not built (build k3 or set K3_BIN_DIR)")
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
            f.write(text)
            f.flush()
            out = run([exe, "encode", "--vocab", MODEL, "--file", f.name]).stdout
        self.assertEqual([int(x) for x in out.strip().split(",")], ids)

    def test_reference_has_learned(self):
        ids = self.tok.encode(HELD_OUT)
        rep = reference(ids, 0, ["--dump-trace", "{tmp}/trace"])
        lg = rep["logits"][:-1].astype(np.float64)
        lg -= lg.max(-1, keepdims=True)
        logp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
        loss = -float(np.mean(logp[np.arange(len(ids) - 1), ids[1:]]))
        uniform = math.log(self.cfg["text_config"]["vocab_size"])
        # Uniform guessing costs ln(V) = 8.4 nats; a unigram model of this text about 6.8 (docs/demo-model.md).
        self.assertLess(loss, 5.5, f"reference loss {loss:.3f} nats/token on held-out text (uniform {uniform:.2f})")

    def test_engine_greedy_equals_reference(self):
        exe = os.path.join(BIN, "k3-compute")
        if not os.path.exists(exe):
            self.fail(f"{exe} not built (build k3 or set K3_BIN_DIR)")
        for prompt in PROMPTS:
            ids = self.tok.encode(prompt)
            ref = reference(ids, GEN)
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "eng.json")
                run([exe, "--standalone", MODEL, "--ids", ",".join(map(str, ids)), "--gen", str(GEN),
                     "--threads", "1", "--out", out])
                with open(out) as f:
                    eng = json.load(f)
            with self.subTest(prompt=prompt):
                self.assertEqual(eng["generated_ids"], ref["generated_ids"],
                                 f"{prompt!r}: engine {self.tok.decode(eng['generated_ids'])!r} vs reference "
                                 f"{self.tok.decode(ref['generated_ids'])!r} (smallest greedy margin "
                                 f"{ref['gen_min_margin']:.3g})")
                self.assertEqual(len(ref["generated_ids"]), GEN)


if __name__ == "__main__":
    unittest.main()
