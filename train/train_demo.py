#!/usr/bin/env python3
"""Train the bundled demo model models/k3-demo-tiny (a tiny K3, every architectural feature kept).

    /usr/bin/python3 train/train_demo.py [--out models/k3-demo-tiny]
        [--work build-demo] [--steps 800] [--threads 1]

Needs Debian python3-torch, python3-regex (tokenizer training), fortunes + fortunes-min (text)
and preferably libopenblas0-pthread (reference BLAS makes torch ~10x slower). Steps:
BPE vocabulary (train/bpe_train.py) -> token ids -> AdamW training with MXFP4 fake-quantised
experts in the last --qat-frac of the steps -> checkpoint in the released layout through the
generator's writer (tests/generator) -> evaluation of the WRITTEN weights (bf16 trunk, MXFP4
experts) read back with the reference's reader: validation loss vs a unigram baseline, loss
before/after export, greedy samples. Everything is seeded; metrics go to train/demo_metrics.json.
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

# One BLAS/OpenMP thread: on a shared 2-core machine extra threads spin and run ~8x slower.
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "generator"))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import bpe_train  # noqa: E402
import corpus  # noqa: E402
import k3_torch  # noqa: E402
import make_checkpoint  # noqa: E402
import mxfp4_quant  # noqa: E402
import ref_mxfp4  # noqa: E402
import ref_safetensors  # noqa: E402
import st_writer  # noqa: E402

N_RANKS = 4096
DIMS = dict(hidden=128, layers=13, vocab=N_RANKS + 256, kda_heads=4, kda_head_dim=32, conv=4,
            mla_heads=4, q_lora=64, kv_lora=64, nope=32, rope=16, v=32, experts=8, top_k=2,
            shared=2, latent=64, moe_inter=64, dense_inter=384, block=3)
PROMPTS = ["The meaning of life is", "A computer is", "Q: What do you get when you cross",
           "It is a truth universally acknowledged", "Never trust a"]


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def dims():
    d = dict(DIMS)
    d["full_attn"] = make_checkpoint.full_attn_layers(d["layers"], False)  # [4, 8, 12, 13]
    return d


def all_specs(d):
    return [s for L in range(d["layers"]) for s in make_checkpoint.layer_specs(L, d)] + make_checkpoint.model_specs(d)


class TrainedInit(make_checkpoint.TinyInit):
    """The generator's tensor builder (bf16 matrices, release dtypes, MXFP4 experts) fed trained values."""

    def __init__(self, arrays, d):
        super().__init__(0, d)
        self.arrays = arrays

    def values(self, name, shape, init):
        return self.arrays[name].reshape(shape)


def write_checkpoint(out_dir, d, arrays, tok_dir):
    """Released layout through the generator's own pieces (same loop as make_checkpoint.main)."""
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    cfg = make_checkpoint.build_config(d, make_checkpoint.TEMPLATE)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    init = TrainedInit(arrays, d)
    groups = [make_checkpoint.layer_specs(L, d) for L in range(d["layers"])] + [make_checkpoint.model_specs(d)]
    n_shards, weight_map, total = len(groups), {}, 0
    for i, specs in enumerate(groups):
        shard = "model-%05d-of-%06d.safetensors" % (i + 1, n_shards)
        tensors = []
        for name, shape, kind in specs:
            tensors += init.tensors(name, shape, kind, "release")
        for t in tensors:
            weight_map[t.name] = shard
        total += st_writer.write_shard(os.path.join(out_dir, shard), tensors)
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
        f.write("\n")
    for n in ("tiktoken.model", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, n), os.path.join(out_dir, n))


def read_back(out_dir, d):
    """The written weights as float64 arrays, decoded with the reference's reader and MXFP4 decoder."""
    ck = ref_safetensors.Checkpoint(out_dir)
    arrays = {}
    for name, shape, init in all_specs(d):
        if not isinstance(init, str) and init[0] == "expert":
            arrays[name] = ref_mxfp4.dequantize(ck.get(name + ".weight_packed"), ck.get(name + ".weight_scale"))
        else:
            arrays[name] = np.asarray(ck.get(name), dtype=np.float64).reshape(shape)
    return arrays


def make_optimizer(model, lr):
    """AdamW, weight decay 0.1 on matrices; the router selection biases are left to balance_experts."""
    for n, k in model.names.items():
        if n.endswith("e_score_correction_bias"):
            model.params[k].requires_grad_(False)  # updated by load balancing, not by gradients
    decay = [p for k, p in model.params.items() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for k, p in model.params.items() if p.requires_grad and p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95))


@torch.no_grad()
def balance_experts(model, stats):
    """Auxiliary-loss-free balancing: raise the bias of under-used experts, lower over-used ones."""
    for L, load in stats.items():
        b = model.lp(L, "block_sparse_moe.gate.e_score_correction_bias")
        b += 1e-3 * torch.sign(load.mean() - load)


@torch.no_grad()
def evaluate(model, ids, seq):
    """Mean next-token loss (nats) over non-overlapping windows of the validation ids."""
    model.eval()
    n = (len(ids) - 1) // seq
    x = torch.from_numpy(ids[: n * seq + 1].astype(np.int64))
    tot, cnt = 0.0, 0
    for i in range(0, n, 8):
        rows = range(i, min(i + 8, n))
        inp = torch.stack([x[r * seq:(r + 1) * seq] for r in rows])
        tgt = torch.stack([x[r * seq + 1:(r + 1) * seq + 1] for r in rows])
        lo = model(inp)
        tot += F.cross_entropy(lo.reshape(-1, lo.shape[-1]), tgt.reshape(-1), reduction="sum").item()
        cnt += tgt.numel()
    model.train()
    return tot / cnt, cnt, x[1: n * seq + 1]


@torch.no_grad()
def greedy(model, ids, n):
    model.eval()
    ids = list(ids)
    for _ in range(n):
        ids.append(int(torch.argmax(model(torch.tensor([ids]))[0, -1])))
    model.train()
    return ids


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "k3-demo-tiny"))
    ap.add_argument("--work", default=os.path.join(ROOT, "build-demo"))
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--qat-frac", type=float, default=0.15, help="final fraction of steps with MXFP4 fake-quant experts")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--gen", type=int, default=24)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    os.makedirs(args.work, exist_ok=True)

    # 1. tokenizer and token ids
    tok_dir = os.path.join(args.work, "tok")
    if not os.path.exists(os.path.join(tok_dir, "tiktoken.model")):
        bpe_train.main([tok_dir, "--ranks", str(N_RANKS)])
    tok = bpe_train.Tokenizer(tok_dir)
    train_text, valid_text = corpus.split_text()
    cache = os.path.join(args.work, "ids.npz")
    if os.path.exists(cache):
        z = np.load(cache)
        tr_ids, va_ids = z["train"], z["valid"]
    else:
        tr_ids = np.array(tok.encode(train_text), dtype=np.int32)
        va_ids = np.array(tok.encode(valid_text), dtype=np.int32)
        np.savez(cache, train=tr_ids, valid=va_ids)
    log(f"text: train {len(train_text)} chars = {len(tr_ids)} tokens, valid {len(valid_text)} chars = {len(va_ids)} tokens")

    # 2. model
    d = dims()
    model = k3_torch.K3(d, all_specs(d))
    model.init_weights(args.seed)
    opt = make_optimizer(model, args.lr)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params} parameters, layer map "
        + "".join("M" if (L + 1) in d["full_attn"] else "K" for L in range(d["layers"])))

    # 3. training
    rng = np.random.default_rng(args.seed)
    data = torch.from_numpy(tr_ids.astype(np.int64))
    warm, qat_from = 30, int(args.steps * (1 - args.qat_frac))
    t0, ema = time.time(), None
    history = []
    for step in range(args.steps):
        lr = args.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        for gr in opt.param_groups:
            gr["lr"] = lr
        model.qat = step >= qat_from
        starts = rng.integers(0, len(data) - args.seq - 1, args.batch)
        batch = torch.stack([data[s:s + args.seq + 1] for s in starts])
        stats = {}
        lo = model(batch[:, :-1], stats)
        loss = F.cross_entropy(lo.reshape(-1, lo.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        balance_experts(model, stats)
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % 5 == 0 or step == args.steps - 1:
            el = time.time() - t0
            log(f"step {step} loss {loss.item():.3f} ema {ema:.3f} lr {lr:.2e} qat {int(model.qat)} "
                f"{el / (step + 1):.2f} s/step, {el / 60:.1f} min")
            history.append([step, round(ema, 4)])

    # 4. evaluation, export, re-evaluation of the written weights
    model.qat = False
    val_fp32, n_val, targets = evaluate(model, va_ids, args.seq)
    model.qat = True
    val_qat, _, _ = evaluate(model, va_ids, args.seq)
    model.qat = False
    write_checkpoint(args.out, d, model.export(), tok_dir)
    model.load(read_back(args.out, d))
    val_written, _, _ = evaluate(model, va_ids, args.seq)
    counts = np.bincount(tr_ids, minlength=d["vocab"]).astype(np.float64) + 1.0  # add-one smoothing
    logp = np.log(counts / counts.sum())
    unigram = float(-logp[targets.numpy()].mean())
    n_bytes = sum(len(tok.by_rank[int(i)]) for i in targets.numpy())
    bpb = lambda nats: nats * n_val / n_bytes / math.log(2)  # noqa: E731
    samples = []
    for p in PROMPTS:
        ids = tok.encode(p)
        out = greedy(model, ids, args.gen)
        samples.append({"prompt": p, "prompt_ids": ids, "greedy_ids": out[len(ids):], "text": tok.decode(out)})
        log(f"sample: {tok.decode(out)!r}")
    metrics = {
        "dims": {k: v for k, v in d.items()}, "parameters": n_params, "steps": args.steps, "batch": args.batch,
        "seq": args.seq, "seed": args.seed, "threads": args.threads, "minutes": round((time.time() - t0) / 60, 1),
        "train_tokens": int(len(tr_ids)), "valid_tokens_scored": n_val, "valid_bytes_scored": n_bytes,
        "val_loss_nats": {"fp32_weights": val_fp32, "fp32_trunk_mxfp4_experts": val_qat,
                          "written_checkpoint": val_written, "unigram_baseline": unigram},
        "val_bits_per_byte": {"written_checkpoint": bpb(val_written), "unigram_baseline": bpb(unigram)},
        "train_loss_ema": history, "samples": samples,
    }
    with open(os.path.join(HERE, "demo_metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
        f.write("\n")
    log(f"valid loss: fp32 {val_fp32:.4f}, experts MXFP4 {val_qat:.4f}, written {val_written:.4f} nats/token "
        f"({bpb(val_written):.3f} bits/byte); unigram {unigram:.4f} ({bpb(unigram):.3f} bits/byte)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
