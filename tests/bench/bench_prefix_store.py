#!/usr/bin/python3
"""The persistent prefix store on the demo model (configs/demo.toml): a second, separate
k3-launch run whose prompt starts with a long prefix an earlier run stored, against the same
invocation without --prefix-store.

  baseline  k3-launch configs/demo.toml --ids P+Q            (P prefilled from nothing)
  fill      k3-launch configs/demo.toml --ids P --prefix-store DIR   (an empty store: writes P)
  store     k3-launch configs/demo.toml --ids P+Q --prefix-store DIR (starts after P minus its last id)

Per run: prompt ids reused (cached_tokens), compute's prefill seconds (the prompt pass up to
the logits that choose the first token) and the wall time from Generate to the first token
(report run_seconds minus the decode steps). The generated ids of `store` must equal
`baseline` (checked). Then the chat: two `--chat --system S` processes, each with one
different user line; the second's first turn reuses the preamble (reused_tokens).

    bench_prefix_store.py BUILD_DIR [--prefix 3000] [--repeats 3]
    bench_prefix_store.py BUILD_DIR --config real.toml --tokenizer models/k3-demo-tiny --chat-only
                          [--system-repeats 30]    (another checkpoint: the chat part alone)

Not a test (not in CI). The prefix ids are a fixed pseudo-random walk over the vocabulary.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONFIG = os.path.join(ROOT, "configs", "demo.toml")
EXTRA = []  # --tokenizer, from the command line


def launch(bins, args, out, stdin=None):
    cmd = [os.path.join(bins, "k3-launch"), CONFIG, "--quiet", "--out", out] + EXTRA + args
    p = subprocess.run(cmd, capture_output=True, text=True, input=stdin, timeout=1200)
    if p.returncode != 0:
        sys.exit("k3-launch failed (%d): %s" % (p.returncode, p.stderr[-2000:]))
    with open(out) as f:
        return json.load(f), p.stderr


def one(bins, ids, gen, extra, out):
    r, _ = launch(bins, ["--ids", ",".join(map(str, ids)), "--gen", str(gen), "--ignore-eos"] + extra, out)
    decode = sum(r.get("token_seconds", []))
    return {"cached": r["cached_tokens"], "prefill": r["prefill_seconds"], "first_token": r["run_seconds"] - decode,
            "ids": r["generated_ids"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--prefix", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--config", help="another model's TOML instead of configs/demo.toml")
    ap.add_argument("--tokenizer", help="tokenizer directory for a checkpoint without one (the chat)")
    ap.add_argument("--chat-only", action="store_true", help="only the two-process chat")
    ap.add_argument("--system-repeats", type=int, default=30, help="copies of the system sentence")
    a = ap.parse_args()
    global CONFIG
    if a.config:
        CONFIG = os.path.abspath(a.config)
    if a.tokenizer:
        EXTRA.extend(["--tokenizer", os.path.abspath(a.tokenizer)])
    bins = os.path.join(os.path.abspath(a.build), "bin")
    if not os.path.exists(os.path.join(bins, "k3-launch")):
        bins = os.path.abspath(a.build)
    tmp = tempfile.mkdtemp(prefix="k3-bench-store-")
    x, P = 12345, []
    for _ in range(a.prefix):  # ids 0..4095 (the demo's BPE ranks), deterministic
        x = (x * 1103515245 + 12345) % (1 << 31)
        P.append(x % 4096)
    Q = [261, 302, 1040, 77, 5, 910, 33, 48]
    gen = 8
    if not a.chat_only:
        ids_part(bins, tmp, P, Q, gen, a.repeats)
    chat_part(bins, tmp, a.system_repeats)
    shutil.rmtree(tmp, ignore_errors=True)


def ids_part(bins, tmp, P, Q, gen, repeats):
    rows = {"baseline": [], "store": []}
    fills = []
    for i in range(repeats):
        store = os.path.join(tmp, "store-%d" % i)
        flags = ["--prefix-store", store, "--prefix-store-size", "1G"]
        rows["baseline"].append(one(bins, P + Q, gen, [], os.path.join(tmp, "b.json")))
        fills.append(one(bins, P, gen, flags, os.path.join(tmp, "f.json")))
        rows["store"].append(one(bins, P + Q, gen, flags, os.path.join(tmp, "s.json")))
        if rows["store"][-1]["ids"] != rows["baseline"][-1]["ids"]:
            sys.exit("the ids differ with the store")
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("prefill", "first_token")} for k, v in rows.items()}
    print("prompt: %d + %d ids, gen %d, %d repeats (medians)" % (len(P), len(Q), gen, repeats))
    print("fill run (empty store): prefill %.3f s, first token %.3f s" %
          (statistics.median(f["prefill"] for f in fills), statistics.median(f["first_token"] for f in fills)))
    for k in ("baseline", "store"):
        print("%-8s cached_tokens %d  prefill %.3f s  first token %.3f s" %
              (k, rows[k][0]["cached"], med[k]["prefill"], med[k]["first_token"]))
    print("ratio baseline/store: prefill %.1fx, first token %.1fx; ids identical" %
          (med["baseline"]["prefill"] / med["store"]["prefill"],
           med["baseline"]["first_token"] / med["store"]["first_token"]))


def chat_part(bins, tmp, system_repeats):
    """A long system message, two separate processes, different first lines; replies capped at 8
    tokens (--reply-limit: a random-weight model's replies need not end)."""
    system = " ".join(["You are a careful assistant who answers in one short sentence."] * system_repeats)
    store = os.path.join(tmp, "chat-store")
    turns = []
    for n, line in enumerate(["What is the capital of France?\n", "Name a colour.\n"] * 2):
        flags = ["--chat", "--system", system, "--reply-limit", "8"] + (["--prefix-store", store] if n < 2 else [])
        r, _ = launch(bins, flags, os.path.join(tmp, "chat%d.json" % n), stdin=line)
        t = r["turns"][0]
        turns.append((("store" if n < 2 else "no store") + (", first" if n == 0 else ""), t["prompt_tokens"],
                      t["reused_tokens"], t["seconds"], t["first_token_seconds"]))
    for name, prompt, reused, secs, first in turns:
        print("chat %-18s prompt_tokens %d reused_tokens %d first token %.3f s turn %.3f s" %
              (name, prompt, reused, first, secs))


if __name__ == "__main__":
    main()
