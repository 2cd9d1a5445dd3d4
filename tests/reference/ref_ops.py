"""The K3 primitives in float64, written from docs/model.md ("Forward pass"). The forward pass and the
op-case emitter both call these, so op cases test the engine against the reference itself."""
import numpy as np

# Optional statistics of SiTU pre-activations (fraction beyond each cap), filled on demand.
SITU_STATS = {"n": 0, "gate_over": 0, "up_over": 0}


def sigmoid(x):
    # tanh form: no overflow warnings for large |x|, exact enough in float64.
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=np.float64)))


def silu(x):
    return x * sigmoid(x)


def rms_norm(x, w, eps):
    """w * x / sqrt(mean(x^2) + eps) over the last axis."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def l2_norm(x, eps=1e-6):
    """x / sqrt(sum(x^2) + eps) over the last axis (a sum, not a mean)."""
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


def situ_glu(a, b, beta1, beta2):
    """[beta1 tanh(a/beta1) sigmoid(a)] * [beta2 tanh(b/beta2)]; beta2 None = up uncapped.
    The sigmoid sees the UNcapped gate a."""
    SITU_STATS["n"] += np.size(a)
    SITU_STATS["gate_over"] += int(np.count_nonzero(np.abs(a) > beta1))
    if beta2 is not None:
        SITU_STATS["up_over"] += int(np.count_nonzero(np.abs(b) > beta2))
    up = b if beta2 is None else beta2 * np.tanh(b / beta2)
    return beta1 * np.tanh(a / beta1) * sigmoid(a) * up


def attn_res(cands, w_norm, w_proj, eps):
    """cands [m, ..., n] with the running sum last. Softmax over m of
    <rms-normalised candidate, w_norm*w_proj>, mixing the RAW candidates."""
    cands = np.asarray(cands, dtype=np.float64)
    keys = cands / np.sqrt(np.mean(cands * cands, axis=-1, keepdims=True) + eps)
    score = keys @ (np.asarray(w_norm) * np.asarray(w_proj).reshape(-1))
    score = score - score.max(axis=0, keepdims=True)
    p = np.exp(score)
    p /= p.sum(axis=0, keepdims=True)
    return np.sum(p[..., None] * cands, axis=0)


def short_conv(taps, state_in, u):
    """Depthwise causal conv, SiLU fused. taps [C,K] (oldest->newest), state_in [C,K-1]
    (oldest first, pre-conv inputs), u [T,C]. Returns (out [T,C], state [C,K-1])."""
    taps = np.asarray(taps, dtype=np.float64)
    C, K = taps.shape
    ext = np.concatenate([np.asarray(state_in, dtype=np.float64).T, u], axis=0)  # [K-1+T, C]
    T = u.shape[0]
    out = np.zeros((T, C))
    for j in range(K):
        out += taps[:, j] * ext[j:j + T]
    return silu(out), ext[T:].T.copy()


def kda_gate(a_log, z, dt_bias, lower_bound):
    """Log decay g[h*D+d] = lower_bound * sigmoid(exp(A_log[h]) * (z + dt_bias)); A_log per HEAD.
    z, dt_bias: [..., H*D]; a_log: [H] (only the first H entries of the padded tensor)."""
    H = len(a_log)
    shape = np.shape(z)
    zz = (np.asarray(z) + dt_bias).reshape(shape[:-1] + (H, -1))
    u = np.exp(np.asarray(a_log))[:, None] * zz
    return (lower_bound * sigmoid(u)).reshape(shape)


def kda_recurrence(S_in, q, k, v, alpha, beta):
    """One head of the delta rule. S [key, value]. Per step: decay rows by alpha, read r = S^T k,
    write S += k (beta (v - r))^T, output o = S^T q with the UPDATED state."""
    S = np.array(S_in, dtype=np.float64)
    T = q.shape[0]
    o = np.zeros((T, S.shape[1]))
    for t in range(T):
        S *= alpha[t][:, None]
        r = k[t] @ S
        S += np.outer(k[t], beta[t] * (v[t] - r))
        o[t] = q[t] @ S
    return o, S


def gated_rms_norm(o, w, gate, eps):
    """Per head: rms-normalise o[h] (width D), times gain w[D], times sigmoid(gate)."""
    o = np.asarray(o, dtype=np.float64)
    y = rms_norm(o, w, eps)
    return y.reshape(o.shape[:-2] + (-1,)) * sigmoid(gate)


def router(logits, bias, top_k, renormalize, scaling):
    """Sigmoid scores; top-k of (s + bias) in descending order (ties: lowest expert id);
    weights from the UNbiased scores, renormalised over the chosen k."""
    s = sigmoid(logits)
    order = np.argsort(-(s + bias), axis=-1, kind="stable")[..., :top_k]
    w = np.take_along_axis(s, order, axis=-1)
    if renormalize:
        w = w / (w.sum(axis=-1, keepdims=True) + 1e-20)
    return order, w * scaling


def round_bf16(x):
    """Nearest bf16 value (8 significant bits, ties to even), kept as float64: frexp gives a
    mantissa in [0.5, 1), so mantissa * 256 in [128, 256) rounds to the 8 bits bf16 keeps.
    (Normal range only; activations never reach bf16's subnormals or its overflow.)"""
    m, e = np.frexp(np.asarray(x, dtype=np.float64))
    return np.ldexp(np.round(m * 256.0) / 256.0, e)  # np.round: half to even


def mxfp4_matvec(packed, scales, x, group=32):
    import ref_mxfp4
    return ref_mxfp4.dequantize(packed, scales, group) @ x


def mla_attention(q, k_nope, k_pe, v, nope, scale):
    """q [T,H,nope+rope]; cache k_nope [S,H,nope], k_pe [S,rope] (one per position, shared by heads),
    v [S,H,vd]. Query t sees cache rows 0..S-T+t. Returns [T,H,vd]."""
    T, S = q.shape[0], k_nope.shape[0]
    s = (np.einsum("thd,shd->hts", q[..., :nope], k_nope) + np.einsum("thd,sd->hts", q[..., nope:], k_pe)) * scale
    mask = np.arange(S)[None, :] > (S - T + np.arange(T))[:, None]
    s = np.where(mask[None], -np.inf, s)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("hts,shd->thd", p, v)
