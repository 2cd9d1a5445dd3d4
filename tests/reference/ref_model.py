"""K3 forward pass in float64 (docs/model.md, "Forward pass"). Full recompute over a token list.

Lazy, so real K3 geometry fits in a few GB: the shards stay mapped, small tensors (norm gains,
biases, conv taps) are cached, matrices are widened to float64 in row blocks only while a
product uses them, embedding rows are read for the ids only, and experts are decoded only when
chosen (once per MoE layer call) and dropped afterwards. The arithmetic is unchanged: every
output element is still one float64 dot product over the full input width.
"""
import numpy as np

import ref_mxfp4
import ref_ops as ops

PREFIX = "language_model.model."
SMALL = 1 << 20          # tensors up to this many elements are widened once and cached
BLOCK_ELEMS = 1 << 25    # a widened row block of a matrix holds at most this many (256 MB)


class Model:
    def __init__(self, ckpt, cfg, mla_norm_eps=1e-6, expert_inputs="f32"):
        self.ck, self.cfg, self.mla_eps = ckpt, cfg, mla_norm_eps
        # "bf16": the routed experts' inputs (latent z, and the SiTU output feeding w2) are
        # rounded to bf16 first, as the official bf16 reference feeds them (docs/model.md, "Numerics").
        self.expert_in = ops.round_bf16 if expert_inputs == "bf16" else (lambda a: a)
        self._cache = {}

    def w(self, name):
        """A small tensor as float64 (cached). Matrices go through lin() instead."""
        if name not in self._cache:
            n = int(np.prod(self.ck.shape(name)))
            if n > SMALL:
                raise ValueError(f"{name}: {n} elements is a matrix; use lin()")
            self._cache[name] = self.ck.get(name)
        return self._cache[name]

    def L(self, layer, name):
        return self.w(f"{PREFIX}layers.{layer}.{name}")

    def lin(self, x, name):
        """x @ W.T for the [R, C] matrix `name`, widening W one row block at a time."""
        R, C = self.ck.shape(name)
        step = max(1, BLOCK_ELEMS // C)
        out = np.empty(x.shape[:-1] + (R,))
        for r0 in range(0, R, step):
            r1 = min(R, r0 + step)
            out[..., r0:r1] = x @ self.ck.rows(name, slice(r0, r1)).T
        return out

    def Llin(self, x, layer, name):
        return self.lin(x, f"{PREFIX}layers.{layer}.{name}")

    def expert(self, layer, e, which):
        """One expert matrix decoded to float64; not cached (the caller drops it after use)."""
        base = f"{PREFIX}layers.{layer}.block_sparse_moe.experts.{e}.{which}."
        return ref_mxfp4.dequantize(self.ck.get(base + "weight_packed"), self.ck.get(base + "weight_scale"))

    # ---- mixers -------------------------------------------------------------------------
    def kda(self, l, x):
        c = self.cfg
        H, D = c.kda_heads, c.kda_dim
        T = x.shape[0]
        a = "self_attn."
        streams = []
        for s in "qkv":
            u = self.Llin(x, l, a + f"{s}_proj.weight")
            taps = self.L(l, a + f"{s}_conv1d.weight")[:, 0, :]
            out, _ = ops.short_conv(taps, np.zeros((u.shape[1], c.conv - 1)), u)
            streams.append(out.reshape(T, H, D))
        q = ops.l2_norm(streams[0]) * D ** -0.5
        k = ops.l2_norm(streams[1])
        v = streams[2]
        beta = ops.sigmoid(self.Llin(x, l, a + "b_proj.weight"))  # [T,H]
        z = self.Llin(self.Llin(x, l, a + "f_a_proj.weight"), l, a + "f_b_proj.weight")
        a_log = self.L(l, a + "A_log").reshape(-1)[:H]
        g = ops.kda_gate(a_log, z, self.L(l, a + "dt_bias").reshape(-1), c.gate_lower_bound)
        alpha = np.exp(g).reshape(T, H, D)
        o = np.zeros((T, H, D))
        for h in range(H):
            o[:, h], _ = ops.kda_recurrence(np.zeros((D, D)), q[:, h], k[:, h], v[:, h], alpha[:, h], beta[:, h])
        gate = self.Llin(x, l, a + "g_proj.weight")
        y = ops.gated_rms_norm(o, self.L(l, a + "o_norm.weight"), gate, c.eps)
        return self.Llin(y, l, a + "o_proj.weight")

    def mla(self, l, x):
        c = self.cfg
        nh, nope, rope, vd = c.mla_heads, c.nope, c.rope, c.v_dim
        T = x.shape[0]
        a = "self_attn."
        cq = ops.rms_norm(self.Llin(x, l, a + "q_a_proj.weight"), self.L(l, a + "q_a_layernorm.weight"), self.mla_eps)
        q = self.Llin(cq, l, a + "q_b_proj.weight").reshape(T, nh, nope + rope)
        ckv = self.Llin(x, l, a + "kv_a_proj_with_mqa.weight")
        lat = ops.rms_norm(ckv[:, :c.kv_lora], self.L(l, a + "kv_a_layernorm.weight"), self.mla_eps)
        k_pe = ckv[:, c.kv_lora:]
        kv = self.Llin(lat, l, a + "kv_b_proj.weight").reshape(T, nh, nope + vd)
        att = ops.mla_attention(q, kv[..., :nope], k_pe, kv[..., nope:], nope, (nope + rope) ** -0.5)
        att = att.reshape(T, nh * vd) * ops.sigmoid(self.Llin(x, l, a + "g_proj.weight"))
        return self.Llin(att, l, a + "o_proj.weight")

    # ---- FFNs ---------------------------------------------------------------------------
    def situ(self, a, b):
        return ops.situ_glu(a, b, self.cfg.situ_beta, self.cfg.situ_linear_beta)

    def dense(self, l, x):
        m = "mlp."
        act = self.situ(self.Llin(x, l, m + "gate_proj.weight"), self.Llin(x, l, m + "up_proj.weight"))
        return self.Llin(act, l, m + "down_proj.weight")

    def moe(self, l, x):
        c = self.cfg
        m = "block_sparse_moe."
        logits = self.Llin(x, l, m + "gate.weight")
        idx, wts = ops.router(logits, self.L(l, m + "gate.e_score_correction_bias").reshape(-1),
                              c.top_k, c.renormalize, c.scaling)
        xl = self.Llin(x, l, m + "routed_expert_down_proj.weight")
        ylat = np.zeros_like(xl)
        for e in np.unique(idx):
            rows, slot = np.nonzero(idx == e)
            z = self.expert_in(xl[rows])
            act = self.expert_in(self.situ(z @ self.expert(l, e, "w1").T, z @ self.expert(l, e, "w3").T))
            ylat[rows] += wts[rows, slot][:, None] * (act @ self.expert(l, e, "w2").T)
        if c.latent_norm:
            ylat = ops.rms_norm(ylat, self.L(l, m + "routed_expert_norm.weight"), c.eps)
        y = self.Llin(ylat, l, m + "routed_expert_up_proj.weight")
        sh = self.situ(self.Llin(x, l, m + "shared_experts.gate_proj.weight"),
                       self.Llin(x, l, m + "shared_experts.up_proj.weight"))
        return y + self.Llin(sh, l, m + "shared_experts.down_proj.weight"), idx

    # ---- whole model --------------------------------------------------------------------
    def forward(self, ids, trace=None):
        """Logits [T, V] for every position. trace: dict filled with per-layer activations."""
        c = self.cfg
        h = self.ck.rows(PREFIX + "embed_tokens.weight", np.asarray(ids))
        if trace is not None:
            trace["embed"] = h
        blocks = []  # per-token block snapshots, as a list of [T,H] arrays
        for l in range(c.layers):
            P = h
            a = ops.attn_res(np.stack(blocks + [P]), self.L(l, "self_attention_res_norm.weight"),
                             self.L(l, "self_attention_res_proj.weight"), c.eps) if blocks else h
            if l % c.block == 0:
                blocks.append(P)
                P = None
            xin = ops.rms_norm(a, self.L(l, "input_layernorm.weight"), c.eps)
            o = self.kda(l, xin) if c.is_kda(l) else self.mla(l, xin)
            P = o if P is None else P + o
            mm = ops.attn_res(np.stack(blocks + [P]), self.L(l, "mlp_res_norm.weight"),
                              self.L(l, "mlp_res_proj.weight"), c.eps)
            xf = ops.rms_norm(mm, self.L(l, "post_attention_layernorm.weight"), c.eps)
            if l < c.first_dense:
                f, idx = self.dense(l, xf), None
            else:
                f, idx = self.moe(l, xf)
            h = P + f
            if trace is not None:
                trace[f"layer{l:03d}.ffn_in"] = mm  # before the post-attention norm
                trace[f"layer{l:03d}.mixer"] = o
                trace[f"layer{l:03d}.ffn"] = f
                if idx is not None:
                    trace[f"layer{l:03d}.topk"] = idx
                trace[f"layer{l:03d}.out"] = h
        hf = ops.attn_res(np.stack(blocks + [h]), self.w(PREFIX + "output_attn_res_norm.weight"),
                          self.w(PREFIX + "output_attn_res_proj.weight"), c.eps)
        hf = ops.rms_norm(hf, self.w(PREFIX + "norm.weight"), c.eps)
        logits = self.lin(hf, "language_model.lm_head.weight")
        if trace is not None:
            trace["final"] = hf
            trace["logits"] = logits
        return logits
