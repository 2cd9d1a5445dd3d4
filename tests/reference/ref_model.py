"""K3 forward pass in float64 (K3-MODEL.md §3, Appendix A). Full recompute over a token list."""
import numpy as np

import ref_mxfp4
import ref_ops as ops

PREFIX = "language_model.model."


class Model:
    def __init__(self, ckpt, cfg, mla_norm_eps=1e-6):
        self.ck, self.cfg, self.mla_eps = ckpt, cfg, mla_norm_eps
        self._cache = {}

    def w(self, name):
        if name not in self._cache:
            self._cache[name] = self.ck.get(name)
        return self._cache[name]

    def L(self, layer, name):
        return self.w(f"{PREFIX}layers.{layer}.{name}")

    def expert(self, layer, e, which):
        key = (layer, e, which)
        if key not in self._cache:
            base = f"{PREFIX}layers.{layer}.block_sparse_moe.experts.{e}.{which}."
            self._cache[key] = ref_mxfp4.dequantize(self.ck.get(base + "weight_packed"),
                                                    self.ck.get(base + "weight_scale"))
        return self._cache[key]

    # ---- mixers -------------------------------------------------------------------------
    def kda(self, l, x):
        c = self.cfg
        H, D = c.kda_heads, c.kda_dim
        T = x.shape[0]
        a = "self_attn."
        streams = []
        for s in "qkv":
            u = x @ self.L(l, a + f"{s}_proj.weight").T
            taps = self.L(l, a + f"{s}_conv1d.weight")[:, 0, :]
            out, _ = ops.short_conv(taps, np.zeros((u.shape[1], c.conv - 1)), u)
            streams.append(out.reshape(T, H, D))
        q = ops.l2_norm(streams[0]) * D ** -0.5
        k = ops.l2_norm(streams[1])
        v = streams[2]
        beta = ops.sigmoid(x @ self.L(l, a + "b_proj.weight").T)  # [T,H]
        z = (x @ self.L(l, a + "f_a_proj.weight").T) @ self.L(l, a + "f_b_proj.weight").T
        a_log = self.L(l, a + "A_log").reshape(-1)[:H]
        g = ops.kda_gate(a_log, z, self.L(l, a + "dt_bias").reshape(-1), c.gate_lower_bound)
        alpha = np.exp(g).reshape(T, H, D)
        o = np.zeros((T, H, D))
        for h in range(H):
            o[:, h], _ = ops.kda_recurrence(np.zeros((D, D)), q[:, h], k[:, h], v[:, h], alpha[:, h], beta[:, h])
        gate = x @ self.L(l, a + "g_proj.weight").T
        y = ops.gated_rms_norm(o, self.L(l, a + "o_norm.weight"), gate, c.eps)
        return y @ self.L(l, a + "o_proj.weight").T

    def mla(self, l, x):
        c = self.cfg
        nh, nope, rope, vd = c.mla_heads, c.nope, c.rope, c.v_dim
        T = x.shape[0]
        a = "self_attn."
        cq = ops.rms_norm(x @ self.L(l, a + "q_a_proj.weight").T, self.L(l, a + "q_a_layernorm.weight"), self.mla_eps)
        q = (cq @ self.L(l, a + "q_b_proj.weight").T).reshape(T, nh, nope + rope)
        ckv = x @ self.L(l, a + "kv_a_proj_with_mqa.weight").T
        lat = ops.rms_norm(ckv[:, :c.kv_lora], self.L(l, a + "kv_a_layernorm.weight"), self.mla_eps)
        k_pe = ckv[:, c.kv_lora:]
        kv = (lat @ self.L(l, a + "kv_b_proj.weight").T).reshape(T, nh, nope + vd)
        att = ops.mla_attention(q, kv[..., :nope], k_pe, kv[..., nope:], nope, (nope + rope) ** -0.5)
        att = att.reshape(T, nh * vd) * ops.sigmoid(x @ self.L(l, a + "g_proj.weight").T)
        return att @ self.L(l, a + "o_proj.weight").T

    # ---- FFNs ---------------------------------------------------------------------------
    def situ(self, a, b):
        return ops.situ_glu(a, b, self.cfg.situ_beta, self.cfg.situ_linear_beta)

    def dense(self, l, x):
        m = "mlp."
        act = self.situ(x @ self.L(l, m + "gate_proj.weight").T, x @ self.L(l, m + "up_proj.weight").T)
        return act @ self.L(l, m + "down_proj.weight").T

    def moe(self, l, x):
        c = self.cfg
        m = "block_sparse_moe."
        logits = x @ self.L(l, m + "gate.weight").T
        idx, wts = ops.router(logits, self.L(l, m + "gate.e_score_correction_bias").reshape(-1),
                              c.top_k, c.renormalize, c.scaling)
        xl = x @ self.L(l, m + "routed_expert_down_proj.weight").T
        ylat = np.zeros_like(xl)
        for e in np.unique(idx):
            rows, slot = np.nonzero(idx == e)
            z = xl[rows]
            act = self.situ(z @ self.expert(l, e, "w1").T, z @ self.expert(l, e, "w3").T)
            ylat[rows] += wts[rows, slot][:, None] * (act @ self.expert(l, e, "w2").T)
        if c.latent_norm:
            ylat = ops.rms_norm(ylat, self.L(l, m + "routed_expert_norm.weight"), c.eps)
        y = ylat @ self.L(l, m + "routed_expert_up_proj.weight").T
        sh = self.situ(x @ self.L(l, m + "shared_experts.gate_proj.weight").T,
                       x @ self.L(l, m + "shared_experts.up_proj.weight").T)
        return y + sh @ self.L(l, m + "shared_experts.down_proj.weight").T, idx

    # ---- whole model --------------------------------------------------------------------
    def forward(self, ids, trace=None):
        """Logits [T, V] for every position. trace: dict filled with per-layer activations."""
        c = self.cfg
        h = self.w(PREFIX + "embed_tokens.weight")[np.asarray(ids)]
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
                trace[f"layer{l:03d}.mixer"] = o
                trace[f"layer{l:03d}.ffn"] = f
                if idx is not None:
                    trace[f"layer{l:03d}.topk"] = idx
                trace[f"layer{l:03d}.out"] = h
        hf = ops.attn_res(np.stack(blocks + [h]), self.w(PREFIX + "output_attn_res_norm.weight"),
                          self.w(PREFIX + "output_attn_res_proj.weight"), c.eps)
        hf = ops.rms_norm(hf, self.w(PREFIX + "norm.weight"), c.eps)
        logits = hf @ self.w("language_model.lm_head.weight").T
        if trace is not None:
            trace["final"] = hf
            trace["logits"] = logits
        return logits
