#!/usr/bin/env python3
"""Fine-tune the demo model on K3's XTML chat format, so a chat turn ends by itself.

    /usr/bin/python3 train/train_chat.py [--base DIR] [--out models/k3-demo-tiny]
        [--steps S] [--from-snapshot build-demo/chat-stepS.pt] [--threads 1]

Starts from the fortune model that train/train_demo.py writes (--base; the default
`build-demo/base` is made by `train_demo.py --out build-demo/base` when missing) and trains on
conversations from train/chat_data.py: fortunes as assistant replies to a few user phrasings
(system prompt sometimes, thinking on with effort low/high/max or off, 1-3 turns), the loss on
the assistant's ids only, every reply closed by <|end_of_msg|>; plain fortune text rides along
in each step so the model keeps its language. Experts stay on the MXFP4 grid (fake quantisation
in every step). The tokenizer is the base's, unchanged. Writes the checkpoint through the same
exporter as train_demo.py, re-evaluates the WRITTEN weights and adds a "chat" section to
train/demo_metrics.json (losses, greedy chat replies and whether each ended by itself).
"""
import argparse
import json
import os
import sys
import time

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe_train  # noqa: E402
import chat_data  # noqa: E402
import corpus  # noqa: E402
import k3_torch  # noqa: E402
import train_demo  # noqa: E402

ROOT = train_demo.ROOT
# (messages, thinking, effort) greedy-decoded after training; users not in chat_data.PHRASES too.
SAMPLES = [([{"role": "user", "content": "Tell me a fortune."}], False, "max"),
           ([{"role": "user", "content": "Hello!"}], True, "max"),
           ([{"role": "user", "content": "What is your name?"}], True, "low"),
           ([{"role": "system", "content": "You are a fortune cookie."},
             {"role": "user", "content": "Say something wise."}], True, "high"),
           ([{"role": "user", "content": "How are you today?"}], False, "max")]


def masked_loss(lo, tgt, mask):
    ce = F.cross_entropy(lo.reshape(-1, lo.shape[-1]), tgt.reshape(-1), reduction="none")
    return (ce * mask.reshape(-1)).sum() / mask.sum()


@torch.no_grad()
def chat_eval(model, r, pool, seq, n, seed):
    """Mean loss (nats) on assistant ids of n held-out conversations (fixed rng)."""
    model.eval()
    rng = np.random.default_rng(seed)
    tot, cnt = 0.0, 0.0
    for _ in range(0, n, 8):
        x, m = chat_data.batch(rng, pool, r, 8, seq)
        x, m = torch.from_numpy(x), torch.from_numpy(m)
        lo = model(x[:, :-1])
        ce = F.cross_entropy(lo.reshape(-1, lo.shape[-1]), x[:, 1:].reshape(-1), reduction="none")
        tot += float((ce * m.reshape(-1)).sum())
        cnt += float(m.sum())
    model.train()
    return tot / cnt


@torch.no_grad()
def chat_samples(model, r, tok, gen):
    out = []
    model.eval()
    for msgs, thinking, effort in SAMPLES:
        ids, _ = r.render(msgs, thinking, effort, generation_prompt=True)
        seq = list(ids)
        for _ in range(gen):
            nxt = int(torch.argmax(model(torch.tensor([seq]))[0, -1]))
            seq.append(nxt)
            if nxt in (r.eom, r.special["[EOS]"]):
                break
        g = seq[len(ids):]
        out.append({"messages": msgs, "thinking": thinking, "effort": effort, "prompt_ids": len(ids),
                    "generated_ids": g, "ended": bool(g) and g[-1] in (r.eom, r.special["[EOS]"]),
                    "text": tok.decode(g)})
    model.train()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=os.path.join(ROOT, "build-demo", "base"))
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "k3-demo-tiny"))
    ap.add_argument("--steps", type=int, default=110)
    ap.add_argument("--batch", type=int, default=4, help="chat conversations per step")
    ap.add_argument("--seq", type=int, default=192)
    ap.add_argument("--text-batch", type=int, default=2, help="plain fortune windows of 128 ids per step")
    ap.add_argument("--lr", type=float, default=2.5e-3)
    ap.add_argument("--eval-chats", type=int, default=8, help="held-out conversations scored before and after")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--gen", type=int, default=0, help="greedy chat samples of up to N ids (torch, slow)")
    ap.add_argument("--metrics", default=os.path.join(HERE, "demo_metrics.json"))
    ap.add_argument("--snapshot-every", type=int, default=5,
                    help="write the weights after every N steps to WORK/chat-stepS.pt (0: never)")
    ap.add_argument("--from-snapshot", help="skip training: export the weights a run of --steps S wrote at step S")
    ap.add_argument("--eval-text-ids", type=int, default=8192, help="held-out fortune ids scored after training")
    ap.add_argument("--work", default=os.path.join(ROOT, "build-demo"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if not os.path.exists(os.path.join(args.base, "config.json")):
        train_demo.log(f"no base model in {args.base}: running train_demo.py --out {args.base}")
        train_demo.main(["--out", args.base, "--threads", str(args.threads)])

    tok = bpe_train.Tokenizer(args.base)
    r = chat_data.Renderer(tok)
    train_pool, valid_pool = chat_data.replies("train"), chat_data.replies("valid")
    train_text, valid_text = corpus.split_text()
    tr_ids = np.array(tok.encode(train_text) if args.text_batch else [], dtype=np.int64)
    va_ids = np.array(tok.encode(valid_text), dtype=np.int32)
    train_demo.log(f"replies: {len(train_pool)} train, {len(valid_pool)} held out; text {len(tr_ids)} ids")

    d = train_demo.dims()
    model = k3_torch.K3(d, train_demo.all_specs(d))
    model.load(train_demo.read_back(args.base, d))
    base_text, _, _ = train_demo.evaluate(model, va_ids[:args.eval_text_ids + 1], 128)
    model.qat = True
    base_chat = chat_eval(model, r, valid_pool, args.seq, args.eval_chats, args.seed + 1)
    train_demo.log(f"base: text {base_text:.4f}, chat (assistant ids) {base_chat:.4f} nats/token")

    opt = train_demo.make_optimizer(model, args.lr)
    rng = np.random.default_rng(args.seed)
    data = torch.from_numpy(tr_ids)
    warm, t0, ema, history, trained_minutes = 10, time.time(), None, [], None
    if args.from_snapshot:
        snap = torch.load(args.from_snapshot)
        if snap["step"] != args.steps:
            raise SystemExit(f"{args.from_snapshot} was written at step {snap['step']}, not --steps {args.steps}")
        with torch.no_grad():
            for k, v in snap["params"].items():
                model.params[k].copy_(v)
        history = snap["history"]
        trained_minutes = snap.get("minutes")
    for step in range(0 if args.from_snapshot else args.steps):
        # Constant after warm-up: the first S steps of any run are the run of --steps S, so a
        # snapshot at step S is exactly what `--steps S` exports.
        lr = args.lr * min(1.0, (step + 1) / warm)
        for gr in opt.param_groups:
            gr["lr"] = lr
        x, m = chat_data.batch(rng, train_pool, r, args.batch, args.seq)
        x, m = torch.from_numpy(x), torch.from_numpy(m)
        stats = {}
        loss = masked_loss(model(x[:, :-1], stats), x[:, 1:], m)
        total = loss
        if args.text_batch:
            starts = rng.integers(0, len(data) - 129, args.text_batch)
            tb = torch.stack([data[s:s + 129] for s in starts])
            lo = model(tb[:, :-1])
            total = loss + 0.5 * F.cross_entropy(lo.reshape(-1, lo.shape[-1]), tb[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        train_demo.balance_experts(model, stats)
        ema = loss.item() if ema is None else 0.9 * ema + 0.1 * loss.item()
        if step % 5 == 0 or step == args.steps - 1:
            el = time.time() - t0
            train_demo.log(f"step {step} chat loss {loss.item():.3f} ema {ema:.3f} lr {lr:.2e} "
                           f"{el / (step + 1):.2f} s/step, {el / 60:.1f} min")
            history.append([step, round(ema, 4)])
        if args.snapshot_every and (step + 1) % args.snapshot_every == 0:
            torch.save({"step": step + 1, "history": list(history), "minutes": (time.time() - t0) / 60,
                        "params": {k: p.detach().clone() for k, p in model.params.items()}},
                       os.path.join(args.work, f"chat-step{step + 1}.pt"))

    minutes = round(trained_minutes if args.from_snapshot and trained_minutes else (time.time() - t0) / 60, 1)
    model.qat = False
    train_demo.write_checkpoint(args.out, d, model.export(), args.base)
    model.load(train_demo.read_back(args.out, d))
    text_loss, _, _ = train_demo.evaluate(model, va_ids[:args.eval_text_ids + 1], 128)
    chat_loss = chat_eval(model, r, valid_pool, args.seq, args.eval_chats, args.seed + 1)
    samples = chat_samples(model, r, tok, args.gen) if args.gen else []
    for s in samples:
        train_demo.log(f"chat sample (ended {s['ended']}): {s['text']!r}")
    metrics = {}
    if os.path.exists(args.metrics):
        with open(args.metrics) as f:
            metrics = json.load(f)
    metrics["chat"] = {
        "base": os.path.relpath(args.base, ROOT), "steps": args.steps, "batch": args.batch, "seq": args.seq,
        "text_batch": args.text_batch, "lr": args.lr, "seed": args.seed, "threads": args.threads,
        "minutes": minutes, "train_replies": len(train_pool), "valid_replies": len(valid_pool),
        "val_chat_loss_nats": {"base": base_chat, "written_checkpoint": chat_loss},
        "val_text_ids_scored": args.eval_text_ids, "val_text_loss_nats": {"base": base_text, "written_checkpoint": text_loss},
        "train_chat_loss_ema": history, "samples": samples,
    }
    with open(args.metrics, "w") as f:
        json.dump(metrics, f, indent=1)
        f.write("\n")
    train_demo.log(f"chat loss {base_chat:.4f} -> {chat_loss:.4f}, text loss {base_text:.4f} -> {text_loss:.4f} "
                   f"nats/token; {sum(s['ended'] for s in samples)}/{len(samples)} greedy replies ended by themselves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
