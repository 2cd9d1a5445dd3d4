"""K3 text model in torch for training the demo (docs/model.md), parameters named as in the release.

Every K3 feature is kept: KDA and gated MLA mixers, dense layer 0, Stable LatentMoE with
sigmoid top-k routing, bias-corrected selection and shared experts, Attention Residuals,
SiTU-GLU, MXFP4 routed experts (fake-quantised with a straight-through estimator for QAT).
KDA runs in an exact chunked form (see kda_chunked) so autograd sees a few dozen ops per
layer instead of one per token.
"""
import math

import torch
import torch.nn.functional as F

PREFIX = "language_model.model."
HEAD = "language_model.lm_head.weight"


def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def l2(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def situ(a, b, beta1=4.0, beta2=25.0):
    return beta1 * torch.tanh(a / beta1) * torch.sigmoid(a) * (beta2 * torch.tanh(b / beta2))


def attn_res(cands, w_norm, w_proj, eps):
    """AR over candidates [n+1, ..., H] (running sum last): softmax over RMS-normed keys."""
    v = torch.stack(cands)
    keys = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    p = torch.softmax((keys * (w_norm * w_proj.reshape(-1))).sum(-1), dim=0)
    return (p.unsqueeze(-1) * v).sum(0)


E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def mxfp4_fake(w):
    """Round w [..., out, in] to MXFP4 exactly like tests/generator/mxfp4_quant.py
    (group 32 along in, exponent floor(log2 amax) - 2, nearest E2M1, ties to the smaller
    magnitude, saturate at 6); the gradient passes straight through."""
    shp = w.shape
    g = w.detach().reshape(*shp[:-1], shp[-1] // 32, 32)
    amax = g.abs().amax(-1, keepdim=True).clamp_min(1e-30)
    scale = torch.exp2(torch.floor(torch.log2(amax)) - 2)
    mag = (g.abs() / scale).clamp_max(6.0)
    table = torch.tensor(E2M1, dtype=w.dtype)
    idx = (mag.unsqueeze(-1) - table).abs().argmin(-1)  # argmin keeps the first (smaller) on ties
    q = (torch.sign(g) * table[idx] * scale).reshape(shp)
    return w + (q - w).detach()


def kda_chunked(q, k, v, g, beta, chunk=16):
    """Delta rule with per-channel decay, exact chunked form, zero initial state.

    q,k,v,g: [B,H,T,D] (g = log alpha in [-5, 0]), beta: [B,H,T]. Per token (docs/model.md, "Kimi Delta Attention"):
    S <- diag(alpha) S; u = beta (v - S^T k); S <- S + k u^T; o = S^T q.
    Inside a chunk with cumulative log decay G_t and chunk state S0 the token updates satisfy
    (I + A) u = beta (v - (e^G k) S0) with A[t,s] = beta_t sum_d k_t k_s e^(G_t - G_s) (s < t),
    and o_t = (e^G q)_t S0 + sum_{s<=t} M[t,s] u_s with M[t,s] = sum_d q_t k_s e^(G_t - G_s).
    e^(G_t - G_s) is split as e^(G_t - R) e^(R - G_s) around the chunk's middle R, so both
    factors stay below e^(5 chunk/2) and the products are plain matmuls. All chunks are
    solved at once; only the state hand-over between chunks is sequential."""
    B, H, T, D = q.shape
    Dv = v.shape[-1]
    C = chunk
    pad = (-T) % C
    if pad:  # zero keys/values and no decay leave the state untouched
        q, k, v, g = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v, g))
        beta = F.pad(beta, (0, pad))
    N = (T + pad) // C
    q, k, v, g = (x.reshape(B, H, N, C, -1) for x in (q, k, v, g))
    beta = beta.reshape(B, H, N, C, 1)
    G = torch.cumsum(g, dim=3)  # [B,H,N,C,D]
    R = G[:, :, :, C // 2 : C // 2 + 1]
    k_up, k_dn, q_up = k * torch.exp(G - R), k * torch.exp(R - G), q * torch.exp(G - R)
    strict = torch.tril(torch.ones(C, C, dtype=q.dtype), -1)
    incl = torch.tril(torch.ones(C, C, dtype=q.dtype))
    A = torch.eye(C, dtype=q.dtype) + beta * (k_up @ k_dn.transpose(-1, -2)) * strict
    M = (q_up @ k_dn.transpose(-1, -2)) * incl
    eG = torch.exp(G)
    W = torch.linalg.solve_triangular(A, beta * v, upper=False, unitriangular=True)  # u when S0 = 0
    Y = torch.linalg.solve_triangular(A, beta * (eG * k), upper=False, unitriangular=True)  # u = W - Y S0
    q_in = eG * q  # reads the incoming state
    k_out = torch.exp(G[:, :, :, -1:] - G) * k  # decays each write to the chunk end
    last = torch.exp(G[:, :, :, -1]).unsqueeze(-1)  # [B,H,N,D,1]
    S = q.new_zeros(B, H, D, Dv)
    outs = []
    for n in range(N):
        u = W[:, :, n] - Y[:, :, n] @ S
        outs.append(q_in[:, :, n] @ S + M[:, :, n] @ u)
        S = last[:, :, n] * S + k_out[:, :, n].transpose(-1, -2) @ u
    return torch.stack(outs, dim=2).reshape(B, H, N * C, Dv)[:, :, :T]


def kda_naive(q, k, v, g, beta):
    """Token-by-token recurrence, for testing kda_chunked."""
    B, H, T, D = q.shape
    S = q.new_zeros(B, H, D, v.shape[-1])
    outs = []
    for t in range(T):
        S = torch.exp(g[:, :, t]).unsqueeze(-1) * S
        r = torch.einsum("bhi,bhij->bhj", k[:, :, t], S)
        S = S + k[:, :, t].unsqueeze(-1) * (beta[:, :, t, None] * (v[:, :, t] - r)).unsqueeze(-2)
        outs.append(torch.einsum("bhi,bhij->bhj", q[:, :, t], S))
    return torch.stack(outs, dim=2)


class K3(torch.nn.Module):
    """d: the generator's dimension dict (hidden, layers, vocab, kda_heads, ..., full_attn)."""

    def __init__(self, d, specs, eps=1e-5, mla_eps=1e-6, lower_bound=-5.0):
        super().__init__()
        self.d, self.eps, self.mla_eps, self.lb = d, eps, mla_eps, lower_bound
        self.qat = False
        self.params = torch.nn.ParameterDict()
        self.names = {}  # checkpoint name -> ParameterDict key (dots are not allowed in keys)
        self.expert_names = {}  # (layer, w) -> list of checkpoint names per expert
        for name, shape, init in specs:
            if not isinstance(init, str) and init[0] == "expert":
                continue
            key = name.replace(".", "__")
            self.names[name] = key
            self.params[key] = torch.nn.Parameter(torch.zeros(shape))
        for L in range(1, d["layers"]):
            for w, shape in (("w1", (d["moe_inter"], d["latent"])), ("w3", (d["moe_inter"], d["latent"])),
                             ("w2", (d["latent"], d["moe_inter"]))):
                key = f"L{L}_experts_{w}"
                self.params[key] = torch.nn.Parameter(torch.zeros(d["experts"], *shape))
                self.expert_names[(L, w)] = key
        self.register_buffer("bias_dummy", torch.zeros(1))

    def p(self, name):
        return self.params[self.names[name]]

    def lp(self, L, name):
        return self.p(f"{PREFIX}layers.{L}.{name}")

    def experts(self, L, w):
        x = self.params[self.expert_names[(L, w)]]
        return mxfp4_fake(x) if self.qat else x

    # ---- init -------------------------------------------------------------------------------
    def init_weights(self, seed):
        gen = torch.Generator().manual_seed(seed)
        d = self.d
        n_mix = 2 * d["layers"]
        with torch.no_grad():
            for name, key in self.names.items():
                t = self.params[key]
                if name.endswith(("layernorm.weight", "_norm.weight", "norm.weight")) and t.dim() == 1:
                    t.fill_(1.0)
                elif name.endswith("res_proj.weight"):
                    t.zero_()  # uniform mixing over blocks at the start, as in AttnRes
                elif name.endswith("A_log"):
                    t.zero_()
                elif name.endswith("dt_bias"):
                    t.copy_(torch.randn(t.shape, generator=gen) * 0.5 + 1.0)
                elif name.endswith("conv1d.weight"):
                    t.copy_(torch.randn(t.shape, generator=gen) * 0.2)
                    t[..., -1] += 1.0  # start near identity on the current token
                elif name.endswith("e_score_correction_bias"):
                    t.zero_()
                elif name.endswith("embed_tokens.weight"):
                    t.copy_(torch.randn(t.shape, generator=gen))
                else:
                    std = 1.0 / math.sqrt(t.shape[-1])
                    if name.endswith(("o_proj.weight", "down_proj.weight", "routed_expert_up_proj.weight")):
                        std /= math.sqrt(n_mix)
                    t.copy_(torch.randn(t.shape, generator=gen) * std)
            for (L, w), key in self.expert_names.items():
                t = self.params[key]
                std = 1.0 / math.sqrt(t.shape[-1]) / (math.sqrt(n_mix) if w == "w2" else 1.0)
                t.copy_(torch.randn(t.shape, generator=gen) * std)

    # ---- mixers -----------------------------------------------------------------------------
    def kda(self, L, x):
        d = self.d
        B, T, _ = x.shape
        H, D, K = d["kda_heads"], d["kda_head_dim"], d["conv"]
        a = "self_attn."
        streams = []
        for s in "qkv":
            u = x @ self.lp(L, a + f"{s}_proj.weight").t()  # [B,T,P]
            taps = self.lp(L, a + f"{s}_conv1d.weight")  # [P,1,K]; tap K-1 multiplies the current input
            # Depthwise causal conv as K shifted multiply-adds (torch's grouped conv1d is slow on CPU).
            up = F.pad(u, (0, 0, K - 1, 0))
            u = sum(up[:, j:j + T] * taps[:, 0, j] for j in range(K))
            streams.append(F.silu(u).reshape(B, T, H, D).transpose(1, 2))
        q = l2(streams[0]) * D ** -0.5
        k = l2(streams[1])
        v = streams[2]
        beta = torch.sigmoid(x @ self.lp(L, a + "b_proj.weight").t()).transpose(1, 2)  # [B,H,T]
        z = (x @ self.lp(L, a + "f_a_proj.weight").t()) @ self.lp(L, a + "f_b_proj.weight").t()
        a_log = self.lp(L, a + "A_log")[:H]
        uu = torch.exp(a_log).repeat_interleave(D) * (z + self.lp(L, a + "dt_bias"))
        g = (self.lb * torch.sigmoid(uu)).reshape(B, T, H, D).transpose(1, 2)
        o = kda_chunked(q, k, v, g, beta).transpose(1, 2)  # [B,T,H,D]
        gate = (x @ self.lp(L, a + "g_proj.weight").t()).reshape(B, T, H, D)
        y = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.eps) * self.lp(L, a + "o_norm.weight")
        y = (y * torch.sigmoid(gate)).reshape(B, T, H * D)
        return y @ self.lp(L, a + "o_proj.weight").t()

    def mla(self, L, x):
        d = self.d
        B, T, _ = x.shape
        nh, nope, rope, vd, kvl = d["mla_heads"], d["nope"], d["rope"], d["v"], d["kv_lora"]
        a = "self_attn."
        cq = rms(x @ self.lp(L, a + "q_a_proj.weight").t(), self.lp(L, a + "q_a_layernorm.weight"), self.mla_eps)
        q = (cq @ self.lp(L, a + "q_b_proj.weight").t()).reshape(B, T, nh, nope + rope).transpose(1, 2)
        ckv = x @ self.lp(L, a + "kv_a_proj_with_mqa.weight").t()
        lat = rms(ckv[..., :kvl], self.lp(L, a + "kv_a_layernorm.weight"), self.mla_eps)
        k_pe = ckv[..., kvl:].unsqueeze(1).expand(B, nh, T, rope)  # one NoPE "rope" key for all heads
        kv = (lat @ self.lp(L, a + "kv_b_proj.weight").t()).reshape(B, T, nh, nope + vd).transpose(1, 2)
        key = torch.cat([kv[..., :nope], k_pe], dim=-1)
        s = (q @ key.transpose(-1, -2)) * (nope + rope) ** -0.5
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ kv[..., nope:]
        att = att.transpose(1, 2).reshape(B, T, nh * vd)
        att = att * torch.sigmoid(x @ self.lp(L, a + "g_proj.weight").t())
        return att @ self.lp(L, a + "o_proj.weight").t()

    # ---- FFNs -------------------------------------------------------------------------------
    def dense(self, L, x):
        m = "mlp."
        return situ(x @ self.lp(L, m + "gate_proj.weight").t(), x @ self.lp(L, m + "up_proj.weight").t()) \
            @ self.lp(L, m + "down_proj.weight").t()

    def moe(self, L, x, stats):
        d = self.d
        m = "block_sparse_moe."
        s = torch.sigmoid(x @ self.lp(L, m + "gate.weight").t())  # [B,T,E], independent sigmoids
        bias = self.lp(L, m + "gate.e_score_correction_bias")
        idx = torch.topk(s.detach() + bias.detach(), d["top_k"], dim=-1).indices  # bias: selection only
        sel = torch.gather(s, -1, idx)
        wts = sel / (sel.sum(-1, keepdim=True) + 1e-20)
        comb = torch.zeros_like(s).scatter(-1, idx, wts)  # [B,T,E], zero for unselected experts
        if stats is not None:
            stats[L] = torch.zeros(d["experts"]).scatter_add(0, idx.reshape(-1), torch.ones(idx.numel()))
        xl = x @ self.lp(L, m + "routed_expert_down_proj.weight").t()  # [B,T,Lt]
        w1, w3, w2 = self.experts(L, "w1"), self.experts(L, "w3"), self.experts(L, "w2")
        # Dense over the 8 experts (cheaper than gathering at this size); unselected ones get weight 0.
        act = situ(torch.einsum("btl,eil->btei", xl, w1), torch.einsum("btl,eil->btei", xl, w3))
        ye = torch.einsum("btei,eli->btel", act, w2)
        ylat = (comb.unsqueeze(-1) * ye).sum(2)
        ylat = rms(ylat, self.lp(L, m + "routed_expert_norm.weight"), self.eps)
        y = ylat @ self.lp(L, m + "routed_expert_up_proj.weight").t()
        sh = situ(x @ self.lp(L, m + "shared_experts.gate_proj.weight").t(),
                  x @ self.lp(L, m + "shared_experts.up_proj.weight").t())
        return y + sh @ self.lp(L, m + "shared_experts.down_proj.weight").t()

    # ---- whole model ------------------------------------------------------------------------
    def forward(self, ids, stats=None):
        d, eps = self.d, self.eps
        h = self.p(PREFIX + "embed_tokens.weight")[ids]
        blocks = []
        for L in range(d["layers"]):
            P = h
            a = attn_res(blocks + [P], self.lp(L, "self_attention_res_norm.weight"),
                         self.lp(L, "self_attention_res_proj.weight"), eps) if blocks else h
            if L % d["block"] == 0:
                blocks.append(P)
                P = None
            xin = rms(a, self.lp(L, "input_layernorm.weight"), eps)
            o = self.mla(L, xin) if (L + 1) in d["full_attn"] else self.kda(L, xin)
            P = o if P is None else P + o
            mm = attn_res(blocks + [P], self.lp(L, "mlp_res_norm.weight"), self.lp(L, "mlp_res_proj.weight"), eps)
            xf = rms(mm, self.lp(L, "post_attention_layernorm.weight"), eps)
            f = self.dense(L, xf) if L == 0 else self.moe(L, xf, stats)
            h = P + f
        hf = attn_res(blocks + [h], self.p(PREFIX + "output_attn_res_norm.weight"),
                      self.p(PREFIX + "output_attn_res_proj.weight"), eps)
        hf = rms(hf, self.p(PREFIX + "norm.weight"), eps)
        return hf @ self.p(HEAD).t()

    # ---- export -----------------------------------------------------------------------------
    def export(self):
        """{checkpoint name: float64 numpy array} with experts split per index (not yet quantised)."""
        out = {name: self.params[key].detach().double().numpy() for name, key in self.names.items()}
        for (L, w), key in self.expert_names.items():
            t = self.params[key].detach().double().numpy()
            for e in range(t.shape[0]):
                out[f"{PREFIX}layers.{L}.block_sparse_moe.experts.{e}.{w}"] = t[e]
        return out

    def load(self, arrays):
        """Inverse of export (used to evaluate the exact written weights)."""
        with torch.no_grad():
            for name, key in self.names.items():
                self.params[key].copy_(torch.from_numpy(arrays[name].reshape(self.params[key].shape)))
            for (L, w), key in self.expert_names.items():
                for e in range(self.params[key].shape[0]):
                    self.params[key][e].copy_(torch.from_numpy(
                        arrays[f"{PREFIX}layers.{L}.block_sparse_moe.experts.{e}.{w}"]))
