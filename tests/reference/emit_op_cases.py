#!/usr/bin/env python3
"""Emit JSON op cases (docs/test-contracts.md, "Op cases") computed with the SAME functions the
reference forward pass uses (ref_ops), so they test the engine's kernels against the reference.

    emit_op_cases.py OUT_DIR [--seed S]

Writes OUT_DIR/<op>.<case>.json and OUT_DIR/index.json. Inputs are rounded to float32 values
(stored exactly as float64) so a float32 engine sees exactly the inputs the reference used;
expected outputs are float64. Cases are adversarial: SiTU inputs span |x| 0.1..1000 so both
caps saturate, the router bias changes the selection (asserted), A_log is spread per head,
the conv and recurrence start from non-zero carried state, AttnRes has 1, 5 and 9 sources,
and one MXFP4 case uses real checkpoint bytes.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_ops as ops  # noqa: E402

REAL_MXFP4 = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "k3-release", "mxfp4-layer1-expert0-w1-rows.json"))


def f32(x):
    """Round to float32 values but keep float64 storage (exactly representable either way)."""
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def tensor(a):
    a = np.asarray(a)
    data = [int(v) for v in a.reshape(-1)] if a.dtype.kind in "iub" else [float(v) for v in a.reshape(-1)]
    return {"shape": list(a.shape), "data": data}


class Emitter:
    def __init__(self, out_dir, seed):
        self.out, self.rng, self.files = out_dir, np.random.default_rng(seed), []
        os.makedirs(out_dir, exist_ok=True)

    def emit(self, op, case, params, inputs, expected):
        doc = {"op": op, "case": case, "params": params,
               "tensors": {**{k: tensor(v) for k, v in inputs.items()},
                           **{"expected_" + k: tensor(v) for k, v in expected.items()}}}
        name = f"{op}.{case}.json"
        # json writes floats with repr(), which round-trips float64 exactly.
        with open(os.path.join(self.out, name), "w") as f:
            json.dump(doc, f, allow_nan=False)
        self.files.append(name)

    def normal(self, *shape, scale=1.0):
        return f32(scale * self.rng.standard_normal(shape))

    def spanning(self, n, lo=0.1, hi=1000.0):
        """Magnitudes log-spaced over [lo, hi] with random signs, shuffled."""
        v = np.logspace(np.log10(lo), np.log10(hi), n) * self.rng.choice([-1.0, 1.0], n)
        return f32(self.rng.permutation(v))


def emit_all(e):
    # rms_norm / l2_norm: ordinary, large and tiny magnitudes (tiny ones make eps matter).
    for case, n, scale in (("n128", 128, 1.0), ("large", 96, 1e3), ("tiny_eps", 64, 1e-3)):
        x, w = e.normal(n, scale=scale), f32(1 + 0.2 * e.rng.standard_normal(n))
        e.emit("rms_norm", case, {"eps": 1e-5}, {"x": x, "w": w}, {"y": ops.rms_norm(x, w, 1e-5)})
    for case, n, scale in (("d16", 16, 1.0), ("d128", 128, 3.0), ("tiny_eps", 16, 1e-4)):
        x = e.normal(n, scale=scale)
        e.emit("l2_norm", case, {"eps": 1e-6}, {"x": x}, {"y": ops.l2_norm(x, 1e-6)})

    # situ_glu: both inputs span 0.1..1000, so the tanh caps saturate; |y| <= beta1*beta2 (equality
    # only where tanh and sigmoid round to 1 in float64).
    for case, b1, b2, n in (("k3_betas", 4.0, 25.0, 257), ("beta1_default", 1.0, 25.0, 64)):
        a, b = e.spanning(n), e.spanning(n)
        y = ops.situ_glu(a, b, b1, b2)
        assert np.all(np.abs(y) <= b1 * b2) and np.mean(np.abs(a) > b1) > 0.3 and np.mean(np.abs(b) > b2) > 0.2
        e.emit("situ_glu", case, {"beta1": b1, "beta2": b2}, {"a": a, "b": b}, {"y": y})

    # attn_res with 1 source (softmax of one = identity), 5 and 9 sources of mixed magnitude.
    for m in (1, 5, 9):
        n = 128
        cands = f32(e.rng.standard_normal((m, n)) * np.logspace(0, 1.5, m)[:, None])
        wn, wp = f32(1 + 0.2 * e.rng.standard_normal(n)), f32(0.3 * e.rng.standard_normal(n))
        y = ops.attn_res(cands[:, None, :], wn, wp, 1e-5)[0]
        e.emit("attn_res", f"m{m}", {"eps": 1e-5}, {"cands": cands, "w_norm": wn, "w_proj": wp}, {"y": y})

    # short_conv with carried non-zero state; prefill of several steps and one decode step.
    for case, C, K, T in (("k4_t6", 16, 4, 6), ("k4_t1", 24, 4, 1), ("k3_t4", 8, 3, 4)):
        taps, st, u = e.normal(C, K, scale=0.4), e.normal(C, K - 1), e.normal(T, C, scale=2.0)
        out, state = ops.short_conv(taps, st, u)
        e.emit("short_conv", case, {"K": K}, {"taps": taps, "state_in": st, "u": u}, {"out": out, "state": state})

    # kda_gate: A_log spread per head (a per-channel indexing bug changes the result), z spread
    # so the decay covers both ends (g near 0 and near the lower bound).
    for case, H, D in (("h4d16", 4, 16), ("h3d8", 3, 8)):
        a_log = f32(np.linspace(-0.4, 1.2, H))
        z, dt = e.normal(H * D, scale=4.0), e.normal(H * D, scale=0.5)
        g = ops.kda_gate(a_log, z, dt, -5.0)
        assert g.min() < -4.0 and g.max() > -0.5
        e.emit("kda_gate", case, {"lower_bound": -5.0}, {"a_log": a_log, "z": z, "dt_bias": dt}, {"g": g})

    # kda_recurrence over several steps from a non-zero state; q normalised and scaled, k normalised.
    for case, D, T in (("d16_t8", 16, 8), ("d16_t1", 16, 1), ("d32_t5", 32, 5)):
        S = e.normal(D, D, scale=0.5)
        q = f32(ops.l2_norm(e.normal(T, D)) * D ** -0.5)
        k = f32(ops.l2_norm(e.normal(T, D)))
        v = e.normal(T, D)
        alpha = f32(np.exp(-5.0 * ops.sigmoid(e.normal(T, D, scale=3.0))))
        beta = f32(ops.sigmoid(e.normal(T, scale=2.0)))
        o, S_out = ops.kda_recurrence(S, q, k, v, alpha, beta)
        e.emit("kda_recurrence", case, {}, {"S_in": S, "q": q, "k": k, "v": v, "alpha": alpha, "beta": beta},
               {"o": o, "S": S_out})

    for case, H, D in (("h4d16", 4, 16), ("h2d32", 2, 32)):
        o, w, gate = e.normal(H, D, scale=0.3), f32(1 + 0.2 * e.rng.standard_normal(D)), e.normal(H * D, scale=3.0)
        e.emit("gated_rms_norm", case, {"eps": 1e-5}, {"o": o, "w": w, "gate": gate},
               {"y": ops.gated_rms_norm(o, w, gate, 1e-5)})

    # router: clustered logits (std 0.02-2) and a spread bias; assert the bias changes the chosen set.
    for case, T, E, k, renorm, scale, std in (("e8k2", 6, 8, 2, True, 1.0, 1.0), ("e64k16", 4, 64, 16, True, 1.0, 0.3),
                                             ("e16k4_scaled", 5, 16, 4, True, 2.5, 0.5),
                                             ("e16k4_norenorm", 5, 16, 4, False, 1.0, 0.5)):
        logits = e.normal(T, E, scale=std)
        bias = f32(e.rng.permutation(np.linspace(-0.15, 0.15, E)))
        idx, w = ops.router(logits, bias, k, renorm, scale)
        plain, _ = ops.router(logits, np.zeros(E), k, renorm, scale)
        assert np.any(np.sort(idx, 1) != np.sort(plain, 1)), f"router case {case}: bias does not change the selection"
        e.emit("router", case, {"top_k": k, "renormalize": renorm, "scaling": scale}, {"logits": logits, "bias": bias},
               {"idx": idx.astype(np.int64), "weights": w})

    # mxfp4_matvec: real checkpoint bytes (first 8 rows of layers.1.experts.0.w1), and a synthetic
    # case with every nibble code and a wide range of scale bytes.
    with open(REAL_MXFP4) as f:
        real = json.load(f)
    cols = real["packed_cols"]
    packed = np.array(real["packed"]["data"], dtype=np.uint8).reshape(-1, cols)[:8]
    scales = np.array(real["scales"]["data"], dtype=np.uint8).reshape(-1, real["scale_cols"])[:8]
    x = e.normal(cols * 2)
    e.emit("mxfp4_matvec", "real_l1_e0_w1", {"group": 32}, {"packed": packed, "scales": scales, "x": x},
           {"y": ops.mxfp4_matvec(packed, scales, x)})
    packed = e.rng.integers(0, 256, (5, 64), dtype=np.uint8)
    scales = e.rng.integers(100, 150, (5, 4), dtype=np.uint8)
    x = e.normal(128)
    e.emit("mxfp4_matvec", "synthetic", {"group": 32}, {"packed": packed, "scales": scales, "x": x},
           {"y": ops.mxfp4_matvec(packed, scales, x)})

    # mla_attention: prefill (T == S), chunk continuing a cache (T < S), single decode step.
    H, nope, rope, vd = 4, 24, 8, 16
    for case, T, S in (("prefill_t5", 5, 5), ("chunk_t3_s7", 3, 7), ("decode_s9", 1, 9)):
        q, kn, kp, v = e.normal(T, H, nope + rope, scale=1.5), e.normal(S, H, nope), e.normal(S, rope), e.normal(S, H, vd)
        scale = (nope + rope) ** -0.5
        e.emit("mla_attention", case, {"heads": H, "nope": nope, "rope": rope, "v": vd, "scale": scale},
               {"q": q, "k_nope": kn, "k_pe": kp, "v": v}, {"out": ops.mla_attention(q, kn, kp, v, nope, scale)})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    e = Emitter(args.out_dir, args.seed)
    emit_all(e)
    with open(os.path.join(args.out_dir, "index.json"), "w") as f:
        json.dump({"cases": e.files}, f, indent=1)
    print(f"wrote {len(e.files)} op cases to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
