#!/usr/bin/env python3
"""Write a K3 checkpoint in the RELEASED layout for any dimensions (docs/model.md).

    make_checkpoint.py OUT_DIR [--preset tiny|real] [--seed S] [--layers N] [--experts E]
                       [--vocab V] [--small-dtype release|f32|bf16] [--real-values bits|gaussian]

tiny: the adversarial 13-layer model (map KKKMKKKMKKKMM, attn_res block 3) whose weights
are scaled so both SiTU caps engage, the router bias reorders the top-k, A_log is spread
per head and conv taps are large. real: real K3 layer geometry, random bf16 bit patterns
written block by block so multi-GB checkpoints take seconds, not minutes (--real-values gaussian:
N(0, std) rounded to bf16 instead, like trained weights, for the coded trunk's sizes; slower).
"""
import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mxfp4_quant  # noqa: E402
import st_writer  # noqa: E402

TEMPLATE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "k3-release", "config.json"))
PREFIX = "language_model.model."
HEAD = "language_model.lm_head.weight"

PRESETS = {
    "tiny": dict(hidden=128, layers=13, vocab=512, kda_heads=4, kda_head_dim=16, conv=4,
                 mla_heads=4, q_lora=64, kv_lora=32, nope=24, rope=8, v=16, experts=8, top_k=2,
                 shared=2, latent=64, moe_inter=64, dense_inter=96, block=3),
    "real": dict(hidden=7168, layers=4, vocab=163840, kda_heads=96, kda_head_dim=128, conv=4,
                 mla_heads=96, q_lora=1536, kv_lora=512, nope=128, rope=64, v=128, experts=32,
                 top_k=16, shared=2, latent=3584, moe_inter=3072, dense_inter=33792, block=12),
}

# Release dtypes of the small tensors (docs/model.md, "Dtypes and bf16"); matrices are always BF16.
RELEASE_F32 = ("A_log", "dt_bias", "conv1d.weight", "o_norm.weight", "e_score_correction_bias")


def full_attn_layers(n_layers, real):
    """One-based MLA layers: every 4th and the last (and, for real, the last two)."""
    s = {l for l in range(1, n_layers + 1) if l % 4 == 0} | {n_layers}
    if real and n_layers >= 2:
        s.add(n_layers - 1)
    return sorted(s)


def build_config(d, template_path):
    with open(template_path) as f:
        cfg = json.load(f)
    tc = cfg["text_config"]
    V = d["vocab"]
    # Special ids keep their distance from the end of the vocabulary, as in the release.
    special = {"bos_token_id": V - 256, "eos_token_id": V - 254, "pad_token_id": V - 1}
    for k, v in special.items():
        cfg[k] = v
        tc[k] = v
    cfg["media_placeholder_token_id"] = V - 235
    tc.update(hidden_size=d["hidden"], num_hidden_layers=d["layers"], vocab_size=V,
              intermediate_size=d["dense_inter"], num_attention_heads=d["mla_heads"],
              num_key_value_heads=d["mla_heads"], q_lora_rank=d["q_lora"], kv_lora_rank=d["kv_lora"],
              qk_nope_head_dim=d["nope"], qk_rope_head_dim=d["rope"], v_head_dim=d["v"],
              moe_intermediate_size=d["moe_inter"], routed_expert_hidden_size=d["latent"],
              num_experts=d["experts"], num_experts_per_token=d["top_k"],
              num_shared_experts=d["shared"], attn_res_block_size=d["block"])
    la = tc["linear_attn_config"]
    mla = d["full_attn"]
    la.update(num_heads=d["kda_heads"], head_dim=d["kda_head_dim"], short_conv_kernel_size=d["conv"],
              full_attn_layers=mla, kda_layers=[l for l in range(1, d["layers"] + 1) if l not in mla])
    if "vision_config" in cfg:
        cfg["vision_config"]["text_hidden_size"] = d["hidden"]
    return cfg


def layer_specs(L, d):
    """(name, shape, init) for every tensor of layer L; init names the initialisation rule."""
    H, P = d["hidden"], d["kda_heads"] * d["kda_head_dim"]
    p = f"{PREFIX}layers.{L}."
    out = [(p + n, [H], "gain") for n in ("input_layernorm.weight", "post_attention_layernorm.weight",
                                          "self_attention_res_norm.weight", "mlp_res_norm.weight")]
    out += [(p + "self_attention_res_proj.weight", [1, H], "res_proj"),
            (p + "mlp_res_proj.weight", [1, H], "res_proj")]
    a = p + "self_attn."
    if (L + 1) not in d["full_attn"]:  # KDA
        D, K = d["kda_head_dim"], d["conv"]
        out += [(a + f"{x}_proj.weight", [P, H], ("mat", 1.0)) for x in "qkv"]
        out += [(a + f"{x}_conv1d.weight", [P, 1, K], "conv") for x in "qkv"]
        out += [(a + "f_a_proj.weight", [D, H], ("mat", 1.0)),
                (a + "f_b_proj.weight", [P, D], ("mat", 1.0)),
                (a + "b_proj.weight", [d["kda_heads"], H], ("mat", 1.0)),
                (a + "A_log", [max(d["kda_heads"], D)], "a_log"),
                (a + "dt_bias", [P], "dt_bias"),
                (a + "g_proj.weight", [P, H], ("mat", 1.0)),
                (a + "o_norm.weight", [D], "gain"),
                (a + "o_proj.weight", [H, P], ("mat", 1.0))]
    else:  # Gated MLA
        nh, qk = d["mla_heads"], d["nope"] + d["rope"]
        out += [(a + "q_a_proj.weight", [d["q_lora"], H], ("mat", 1.0)),
                (a + "q_a_layernorm.weight", [d["q_lora"]], "gain"),
                (a + "q_b_proj.weight", [nh * qk, d["q_lora"]], ("mat", 1.5)),
                (a + "kv_a_proj_with_mqa.weight", [d["kv_lora"] + d["rope"], H], ("mat", 1.0)),
                (a + "kv_a_layernorm.weight", [d["kv_lora"]], "gain"),
                (a + "kv_b_proj.weight", [nh * (d["nope"] + d["v"]), d["kv_lora"]], ("mat", 1.5)),
                (a + "g_proj.weight", [nh * d["v"], H], ("mat", 1.0)),
                (a + "o_proj.weight", [H, nh * d["v"]], ("mat", 1.0))]
    # Gate/up scales push SiTU pre-activations past both caps (|a|>4, |b|>25) on many channels.
    if L == 0:
        m, I = p + "mlp.", d["dense_inter"]
        out += [(m + "gate_proj.weight", [I, H], ("mat", 6.0)), (m + "up_proj.weight", [I, H], ("mat", 20.0)),
                (m + "down_proj.weight", [H, I], ("mat", 0.05))]
    else:
        m, E, Lt, S = p + "block_sparse_moe.", d["experts"], d["latent"], d["shared"] * d["moe_inter"]
        out += [(m + "gate.weight", [E, H], ("mat", 1.0)),
                (m + "gate.e_score_correction_bias", [E], "bias"),
                (m + "routed_expert_down_proj.weight", [Lt, H], ("mat", 1.0)),
                (m + "routed_expert_norm.weight", [Lt], "gain"),
                (m + "routed_expert_up_proj.weight", [H, Lt], ("mat", 1.0)),
                (m + "shared_experts.gate_proj.weight", [S, H], ("mat", 6.0)),
                (m + "shared_experts.up_proj.weight", [S, H], ("mat", 20.0)),
                (m + "shared_experts.down_proj.weight", [H, S], ("mat", 0.05))]
        I = d["moe_inter"]
        for e in range(E):
            for w, shape, scale in (("w1", [I, Lt], 6.0), ("w3", [I, Lt], 20.0), ("w2", [Lt, I], 0.05)):
                out.append((m + f"experts.{e}.{w}", shape, ("expert", scale)))
    return out


def model_specs(d):
    H, V = d["hidden"], d["vocab"]
    return [(PREFIX + "embed_tokens.weight", [V, H], "embed"),
            (HEAD, [V, H], ("mat", 3.0)),
            (PREFIX + "norm.weight", [H], "gain"),
            (PREFIX + "output_attn_res_norm.weight", [H], "gain"),
            (PREFIX + "output_attn_res_proj.weight", [1, H], "res_proj")]


def small_dtype(name, mode):
    if mode == "f32":
        return "F32"
    if mode == "bf16":
        return "BF16"
    return "F32" if any(name.endswith(s) for s in RELEASE_F32) else "BF16"


class TinyInit:
    """Float64 initialisation, deterministic from the seed: one child generator per tensor name."""

    def __init__(self, seed, d):
        self.seed, self.d = seed, d

    def rng(self, name):
        # Per-name streams keep every tensor's values independent of the tensor order.
        key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
        return np.random.default_rng([self.seed, key])

    def values(self, name, shape, init):
        r = self.rng(name)
        n = int(np.prod(shape))
        kind = init if isinstance(init, str) else init[0]
        if kind in ("mat", "expert"):
            return r.standard_normal(shape) * (init[1] / np.sqrt(shape[-1]))
        if kind == "embed":
            return r.standard_normal(shape)
        if kind == "gain":
            return 1.0 + 0.2 * r.standard_normal(shape)
        if kind == "res_proj":
            return 0.1 * r.standard_normal(shape)
        if kind == "conv":
            return 0.4 * r.standard_normal(shape)
        if kind == "dt_bias":
            return 0.5 * r.standard_normal(shape)
        if kind == "bias":
            return r.permutation(np.linspace(-0.15, 0.15, n)).reshape(shape)
        if kind == "a_log":
            a = np.zeros(n)
            a[: self.d["kda_heads"]] = np.linspace(-0.4, 1.2, self.d["kda_heads"])
            return a
        raise ValueError(kind)

    def tensors(self, name, shape, init, mode):
        if not isinstance(init, str) and init[0] == "expert":
            packed, scales = mxfp4_quant.quantize(self.values(name, shape, init))
            return [st_writer.Tensor(name + ".weight_packed", "U8", packed.shape, packed),
                    st_writer.Tensor(name + ".weight_scale", "U8", scales.shape, scales)]
        is_matrix = not isinstance(init, str) or init == "embed"
        dt = "BF16" if is_matrix else small_dtype(name, mode)
        v = self.values(name, shape, init)
        data = st_writer.f64_to_bf16_bits(v) if dt == "BF16" else v.astype("<f4")
        return [st_writer.Tensor(name, dt, shape, data)]


class RealInit(TinyInit):
    """Fast initialisation for real geometry: random bf16 bit patterns generated in blocks."""

    BLOCK = 1 << 24  # elements per generated block
    gaussian = False  # --real-values gaussian

    def bf16_chunks(self, name, n, std):
        def gen():
            r = self.rng(name)
            if self.gaussian:
                for done in range(0, n, self.BLOCK):
                    u = (r.standard_normal(min(self.BLOCK, n - done), dtype=np.float32) * np.float32(std)).view(np.uint32)
                    yield ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # nearest, ties to even
                return
            # Exponent field for magnitudes in [std/4, 4*std): base exponent plus 2 random bits.
            base = 127 + int(np.floor(np.log2(std))) - 2
            done = 0
            while done < n:
                m = min(self.BLOCK, n - done)
                bits = r.integers(0, 1 << 16, m, dtype=np.uint16)
                exp = (base + ((bits >> 7) & 3)).astype(np.uint16)
                yield (bits & 0x807F) | (exp << 7)
                done += m
        return gen

    def tensors(self, name, shape, init, mode):
        kind = init if isinstance(init, str) else init[0]
        n = int(np.prod(shape))
        if kind == "expert":
            rows, cols = shape
            # Drawn when written, not held: a layer of 896 real experts is 15.7 GB.
            def packed():
                yield self.rng(name).integers(0, 256, (rows, cols // 2), dtype=np.uint8)

            def scales():
                r = self.rng(name)
                r.integers(0, 256, (rows, cols // 2), dtype=np.uint8)  # the same stream as before: packed first
                yield r.integers(120, 123, (rows, cols // 32), dtype=np.uint8)  # the real range 2^-7..2^-5
            return [st_writer.Tensor(name + ".weight_packed", "U8", (rows, cols // 2), packed),
                    st_writer.Tensor(name + ".weight_scale", "U8", (rows, cols // 32), scales)]
        if kind in ("mat", "embed"):
            std = 1.0 if kind == "embed" else init[1] / np.sqrt(shape[-1])
            return [st_writer.Tensor(name, "BF16", shape, self.bf16_chunks(name, n, std))]
        return TinyInit.tensors(self, name, shape, init, mode)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--experts", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--small-dtype", choices=["release", "f32", "bf16"], default="release",
                    help="dtype of the small non-matrix tensors (default: exactly the release's)")
    ap.add_argument("--real-values", choices=["bits", "gaussian"], default="bits",
                    help="real preset matrices: random bf16 bit patterns in four exponents (fast) or N(0, std) in bf16")
    ap.add_argument("--template", default=TEMPLATE, help="released config.json to copy the shape from")
    args = ap.parse_args(argv)

    d = dict(PRESETS[args.preset])
    for k in ("layers", "experts", "vocab"):
        if getattr(args, k) is not None:
            d[k] = getattr(args, k)
    if d["layers"] < 1 or d["experts"] < d["top_k"] or d["vocab"] < 257:
        ap.error("need layers >= 1, experts >= top_k and vocab >= 257")
    d["full_attn"] = full_attn_layers(d["layers"], args.preset == "real")
    init = (RealInit if args.preset == "real" else TinyInit)(args.seed, d)
    init.gaussian = args.real_values == "gaussian"

    os.makedirs(args.out_dir, exist_ok=True)
    cfg = build_config(d, args.template)
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")

    n_shards = d["layers"] + 1
    weight_map, total = {}, 0
    t0 = time.time()
    groups = [layer_specs(L, d) for L in range(d["layers"])] + [model_specs(d)]
    for i, specs in enumerate(groups):
        shard = "model-%05d-of-%06d.safetensors" % (i + 1, n_shards)
        tensors = []
        for name, shape, kind in specs:
            tensors += init.tensors(name, shape, kind, args.small_dtype)
        for t in tensors:
            weight_map[t.name] = shard
        nbytes = st_writer.write_shard(os.path.join(args.out_dir, shard), tensors)
        total += nbytes
        if args.preset == "real":
            print(f"  {shard}: {nbytes / 1e9:.2f} GB, {total / 1e9:.2f} GB total, {time.time() - t0:.1f} s",
                  flush=True)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(args.out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    layer_map = "".join("M" if (L + 1) in d["full_attn"] else "K" for L in range(d["layers"]))
    print(f"wrote {args.out_dir}: preset {args.preset}, seed {args.seed}, {n_shards} shards, "
          f"{len(weight_map)} tensors, {total} bytes, layer map {layer_map}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
