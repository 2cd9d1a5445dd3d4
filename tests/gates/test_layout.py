#!/usr/bin/env python3
"""Gate: the generator writes the RELEASED layout (docs/model.md, "Checkpoint files"), checked with the
reference's own reader plus a structural check of every shard header.

    test_layout.py            (K3_TESTDATA must hold the fixture's tiny and tiny-s99-bf16)

The checker is also shown to FAIL on shards written in name-only order, with __metadata__,
or with a gap between tensors.
"""
import json
import os
import re
import struct
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
sys.path.insert(0, os.path.join(HERE, "..", "generator"))
import ref_config  # noqa: E402
import ref_mxfp4  # noqa: E402
import ref_safetensors  # noqa: E402
import st_writer  # noqa: E402

ORDER = {"F32": 0, "BF16": 1, "U8": 2}
RELEASE_F32 = ("A_log", "dt_bias", "conv1d.weight", "o_norm.weight", "e_score_correction_bias")
P = "language_model.model."


def check_shard_structure(path):
    """Raise AssertionError unless the shard is laid out like the release."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        text = f.read(n)
    size = os.path.getsize(path)
    assert n % 8 == 0, f"{path}: header length {n} not a multiple of 8"
    body = text.rstrip(b" ")
    assert body.endswith(b"}") and set(text[len(body):]) <= {0x20}, f"{path}: header not padded with spaces"
    header = json.loads(body.decode("utf-8"))
    assert "__metadata__" not in header, f"{path}: has __metadata__"
    names = list(header)
    keys = [(ORDER[header[k]["dtype"]], k) for k in names]
    assert keys == sorted(keys), f"{path}: tensors not in dtype-then-name order"
    offset = 0
    for k in names:  # data sections follow the header order without gaps
        b, e = header[k]["data_offsets"]
        assert b == offset, f"{path}: {k} starts at {b}, expected {offset}"
        offset = e
    assert 8 + n + offset == size, f"{path}: file size {size} != header+data {8 + n + offset}"
    return header


def expected_shapes(cfg):
    """name -> shape for every tensor of docs/model.md "Tensor names" at the config's dimensions."""
    H, V = cfg.hidden, cfg.vocab
    Pk, D = cfg.kda_heads * cfg.kda_dim, cfg.kda_dim
    out = {P + "embed_tokens.weight": [V, H], "language_model.lm_head.weight": [V, H], P + "norm.weight": [H],
           P + "output_attn_res_norm.weight": [H], P + "output_attn_res_proj.weight": [1, H]}
    for L in range(cfg.layers):
        p = f"{P}layers.{L}."
        for n in ("input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "mlp_res_norm"):
            out[p + n + ".weight"] = [H]
        out[p + "self_attention_res_proj.weight"] = [1, H]
        out[p + "mlp_res_proj.weight"] = [1, H]
        a = p + "self_attn."
        if cfg.is_kda(L):
            for s in "qkv":
                out[a + f"{s}_proj.weight"] = [Pk, H]
                out[a + f"{s}_conv1d.weight"] = [Pk, 1, cfg.conv]
            out.update({a + "f_a_proj.weight": [D, H], a + "f_b_proj.weight": [Pk, D],
                        a + "b_proj.weight": [cfg.kda_heads, H], a + "A_log": [max(cfg.kda_heads, D)],
                        a + "dt_bias": [Pk], a + "g_proj.weight": [Pk, H], a + "o_norm.weight": [D],
                        a + "o_proj.weight": [H, Pk]})
        else:
            nh = cfg.mla_heads
            out.update({a + "q_a_proj.weight": [cfg.q_lora, H], a + "q_a_layernorm.weight": [cfg.q_lora],
                        a + "q_b_proj.weight": [nh * (cfg.nope + cfg.rope), cfg.q_lora],
                        a + "kv_a_proj_with_mqa.weight": [cfg.kv_lora + cfg.rope, H],
                        a + "kv_a_layernorm.weight": [cfg.kv_lora],
                        a + "kv_b_proj.weight": [nh * (cfg.nope + cfg.v_dim), cfg.kv_lora],
                        a + "g_proj.weight": [nh * cfg.v_dim, H], a + "o_proj.weight": [H, nh * cfg.v_dim]})
        if L < cfg.first_dense:
            m = p + "mlp."
            out.update({m + "gate_proj.weight": [cfg.dense_inter, H], m + "up_proj.weight": [cfg.dense_inter, H],
                        m + "down_proj.weight": [H, cfg.dense_inter]})
        else:
            m, S, I, Lt = p + "block_sparse_moe.", cfg.shared * cfg.moe_inter, cfg.moe_inter, cfg.latent
            out.update({m + "gate.weight": [cfg.experts, H], m + "gate.e_score_correction_bias": [cfg.experts],
                        m + "routed_expert_down_proj.weight": [Lt, H], m + "routed_expert_norm.weight": [Lt],
                        m + "routed_expert_up_proj.weight": [H, Lt],
                        m + "shared_experts.gate_proj.weight": [S, H], m + "shared_experts.up_proj.weight": [S, H],
                        m + "shared_experts.down_proj.weight": [H, S]})
            for e in range(cfg.experts):
                for w, (r, c) in (("w1", (I, Lt)), ("w3", (I, Lt)), ("w2", (Lt, I))):
                    out[m + f"experts.{e}.{w}.weight_packed"] = [r, c // 2]
                    out[m + f"experts.{e}.{w}.weight_scale"] = [r, c // 32]
    return out


class LayoutMixin:
    model = None
    small = None  # "release" or "bf16"

    def setUp(self):
        td = os.environ.get("K3_TESTDATA")
        self.dir = os.path.join(td or "", self.model)
        if not td or not os.path.isdir(self.dir):
            self.fail(f"{self.dir} missing: run the gate fixture (setup_testdata.py) first")
        self.cfg = ref_config.Config(os.path.join(self.dir, "config.json"))

    def test_config_is_nested_release_shape(self):
        with open(os.path.join(self.dir, "config.json")) as f:
            top = json.load(f)
        with open(os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "k3-release", "config.json"))) as f:
            rel = json.load(f)
        self.assertEqual(set(top), set(rel))
        self.assertEqual(set(top["text_config"]), set(rel["text_config"]))
        self.assertEqual(set(top["text_config"]["linear_attn_config"]), set(rel["text_config"]["linear_attn_config"]))
        la = top["text_config"]["linear_attn_config"]
        self.assertEqual(sorted(la["kda_layers"] + la["full_attn_layers"]), list(range(1, self.cfg.layers + 1)))
        layer_map = "".join("K" if self.cfg.is_kda(L) else "M" for L in range(self.cfg.layers))
        self.assertEqual(layer_map, "KKKMKKKMKKKMM")

    def test_shards_and_index(self):
        with open(os.path.join(self.dir, "model.safetensors.index.json")) as f:
            index = json.load(f)
        n = self.cfg.layers + 1
        shards = sorted(set(index["weight_map"].values()))
        self.assertEqual(shards, ["model-%05d-of-%06d.safetensors" % (i, n) for i in range(1, n + 1)])
        total = 0
        for s in shards:
            header = check_shard_structure(os.path.join(self.dir, s))
            total += sum(v["data_offsets"][1] - v["data_offsets"][0] for v in header.values())
            for k in header:
                self.assertEqual(index["weight_map"][k], s)
                m = re.match(r"language_model\.model\.layers\.(\d+)\.", k)
                want = int(m.group(1)) + 1 if m else n  # layer L in shard L+1, model-level in the last
                self.assertEqual(s, "model-%05d-of-%06d.safetensors" % (want, n), k)
        self.assertEqual(index["metadata"]["total_size"], total)

    def test_names_shapes_dtypes(self):
        ck = ref_safetensors.Checkpoint(self.dir)
        want = expected_shapes(self.cfg)
        self.assertEqual(sorted(ck.names()), sorted(want))
        for name, shape in want.items():
            self.assertEqual(ck.shape(name), shape, name)
            dt = ck.dtype(name)
            if name.endswith(("weight_packed", "weight_scale")):
                self.assertEqual(dt, "U8", name)
            elif len(shape) == 2 and shape[0] > 1:
                self.assertEqual(dt, "BF16", name)  # matrices
            elif self.small == "bf16":
                self.assertEqual(dt, "BF16", name)
            else:
                self.assertEqual(dt, "F32" if name.endswith(RELEASE_F32) else "BF16", name)

    def test_values(self):
        ck = ref_safetensors.Checkpoint(self.dir)
        for L in range(self.cfg.layers):
            if self.cfg.is_kda(L):
                a = ck.get(f"{P}layers.{L}.self_attn.A_log")
                np.testing.assert_allclose(a[:self.cfg.kda_heads], np.linspace(-0.4, 1.2, self.cfg.kda_heads), atol=2e-2)
                self.assertTrue(np.all(a[self.cfg.kda_heads:] == 0), "A_log padding must be zero")
        base = f"{P}layers.1.block_sparse_moe.experts.0.w1."
        scales = ck.get(base + "weight_scale")
        self.assertTrue(np.all((scales > 0) & (scales < 255)))
        w = ref_mxfp4.dequantize(ck.get(base + "weight_packed"), scales)
        # exponent rule floor(log2(amax)) - 2 puts every group's max in [4, 8) scale units, stored <= 6.
        amax = np.abs(w).reshape(w.shape[0], -1, 32).max(axis=2) / ref_mxfp4.e8m0(scales)
        self.assertTrue(np.all((amax >= 4) & (amax <= 6)), "group maxima outside the E2M1 top range")


class TinyRelease(LayoutMixin, unittest.TestCase):
    model, small = "tiny", "release"


class TinyBf16(LayoutMixin, unittest.TestCase):
    model, small = "tiny-s99-bf16", "bf16"


class CheckerCanFail(unittest.TestCase):
    """The structural checker rejects layouts the release does not use."""

    def write(self, tensors, path, order=None, metadata=False, gap=0):
        header, offset = {}, 0
        if metadata:
            header["__metadata__"] = {"format": "pt"}
        for t in order or st_writer.layout_order(tensors):
            header[t.name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": [offset + gap, offset + gap + t.nbytes]}
            offset += t.nbytes + gap
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * ((-len(text)) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"\0" * offset)

    def tensors(self):
        return [st_writer.Tensor("b.weight", "F32", [2], np.zeros(2, "<f4")),
                st_writer.Tensor("a.weight", "BF16", [2], np.zeros(2, "<u2")),
                st_writer.Tensor("c.packed", "U8", [4], np.zeros(4, "u1"))]

    def test_rejects(self):
        with tempfile.TemporaryDirectory() as d:
            good = os.path.join(d, "good.safetensors")
            st_writer.write_shard(good, self.tensors())
            check_shard_structure(good)
            for label, kw in (("name order", {"order": sorted(self.tensors(), key=lambda t: t.name)}),
                              ("metadata", {"metadata": True}), ("gap", {"gap": 8})):
                bad = os.path.join(d, label + ".safetensors")
                self.write(self.tensors(), bad, **kw)
                with self.assertRaises(AssertionError, msg=label):
                    check_shard_structure(bad)


if __name__ == "__main__":
    unittest.main(verbosity=2)
