#!/usr/bin/python3
"""Server benchmark: aggregate generated tokens/s of `k3-launch --serve` with
1, 2, 4 and 8 concurrent streams, as ratios against 1 stream measured in the same run, on the
real-geometry checkpoint at the streaming budget and at all-resident. Not a test: it prints
numbers and writes a report.

    bench_server.py BUILD_DIR [--bin DIR] [--ckpt-dir DIR] [--streams 1,2,4,8] [--gen 8]
                    [--repeats 3] [--budgets stream,resident] [--report tests/bench/results/FILE.md]

Per step it reports, from the server's /metrics (fed by compute's Step messages), the batch
size, the distinct routed experts the step requested (the union of the batch's experts) and the
bytes the step used, and it checks each batched step against what its bytes cost at the
single-stream rate: seconds per step / (bytes per step / single-stream bytes per second), goal
<= 1.2. Only the trunk read is shared between the streams; each stream's experts are its own.

The checkpoint is bench_pipeline.py's (cached in --ckpt-dir, default BUILD_DIR); the server
needs a tokenizer, so the run uses a directory of links to the checkpoint's files plus a
generated tokenizer of exactly the checkpoint's vocabulary (bench_floor_peaks.make_vocab).
Prompts are distinct token-id lists (OpenAI's prompt-as-ids form), so no stream's tokens depend
on the tokenizer; stream 0's ids (return_token_ids) must be the same at every stream count. The page cache is dropped before each budget's runs; the host
may still cache this virtual disk, which the report says.
"""
import argparse
import datetime
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import bench_pipeline as bp  # noqa: E402  (checkpoint, budgets, machine facts)
from bench_floor_peaks import make_vocab  # noqa: E402  (a K3-format tokenizer of N ids)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_dir(ckpt, base, vocab):
    """A directory of links to the checkpoint plus a generated tokenizer of exactly `vocab` ids
    (the server decodes every generated id)."""
    d = os.path.join(base, os.path.basename(ckpt) + "-serve")
    os.makedirs(d, exist_ok=True)
    for name in os.listdir(ckpt):
        link = os.path.join(d, name)
        if not os.path.lexists(link):
            os.symlink(os.path.join(ckpt, name), link)
    if not os.path.exists(os.path.join(d, "tiktoken.model")):
        make_vocab(d, vocab)
    return d


def http(method, url, body=None, timeout=3600):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read().decode()


def metrics(base):
    """{name{labels}: value} from /metrics (Prometheus text)."""
    _, text = http("GET", base + "/metrics")
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        k, _, v = line.rpartition(" ")
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


def metric(m, name):
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))


class Server:
    def __init__(self, bins, toml, model, budget_mib, max_batch, io, threads):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [os.path.join(bins, "k3-launch"), toml, "--model", model, "--budget", f"{budget_mib}M",
               "--serve", f"127.0.0.1:{self.port}", "--max-batch", str(max_batch), "--io", io, "--quiet"]
        if threads:
            cmd += ["--threads", str(threads)]
        self.cmd = cmd
        self.err = open(os.path.join(os.path.dirname(toml), f"serve-{budget_mib}.log"), "w")
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.err)
        t0 = time.time()
        while True:
            if self.p.poll() is not None:
                raise SystemExit(f"bench: {' '.join(cmd)} exited {self.p.returncode} (log {self.err.name})")
            try:
                if http("GET", self.base + "/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if time.time() - t0 > 600:
                raise SystemExit("bench: the server was not healthy within 600 s")
            time.sleep(0.2)
        self.ready_seconds = time.time() - t0

    def stop(self):
        self.p.send_signal(2)
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.err.close()


def prompt(i, vocab):
    # Distinct, deterministic prompts of four ordinary ids (below the tokenizer's specials).
    return [1 + (i * 97 + j * 31) % (vocab - 300) for j in range(4)]


def burst(srv, n, gen, vocab, model_name):
    """n concurrent completions; returns (wall seconds, generated tokens, per-stream ids)."""
    out = [None] * n
    errs = []

    def one(i):
        body = {"model": model_name, "prompt": prompt(i, vocab), "max_tokens": gen, "temperature": 0,
                "ignore_eos": True, "return_token_ids": True}
        try:
            _, text = http("POST", srv.base + "/v1/completions", body)
            r = json.loads(text)
            out[i] = r
        except Exception as e:  # noqa: BLE001  (reported below)
            errs.append(f"stream {i}: {e}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    if errs:
        raise SystemExit("bench: " + "; ".join(errs))
    toks = sum(r["usage"]["completion_tokens"] for r in out)
    return wall, toks, [json.dumps(r["choices"][0].get("token_ids")) for r in out]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--bin")
    ap.add_argument("--ckpt-dir")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--gen", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budgets", default="stream,resident")
    ap.add_argument("--io", default="direct")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--no-drop", action="store_true")
    ap.add_argument("--report")
    a = ap.parse_args(argv)
    build = os.path.abspath(a.build)
    bins = os.path.abspath(a.bin or os.path.join(build, "bin"))
    streams = [int(s) for s in a.streams.split(",")]
    ckpt = bp.ensure_checkpoint(os.path.abspath(a.ckpt_dir or build), a.layers, a.experts, a.vocab)
    runs = os.path.join(build, "bench-server-runs")
    os.makedirs(runs, exist_ok=True)
    model = serve_dir(ckpt, runs, a.vocab)
    toml = os.path.join(runs, "serve.toml")
    with open(toml, "w") as f:
        # max_batch in the TOML, so the dry runs that choose the budgets plan the batch's state.
        f.write(f'model = "{model}"\nbudget = "auto"\nio = "{a.io}"\ncontext = 4096\nmax_batch = {max(streams)}\n')
    w = bp.weight_bytes(ckpt)
    budgets, floor = bp.choose_budgets(bins, toml, ckpt, w)
    budgets = [b for b in budgets if b[0] in a.budgets.split(",")]
    facts = bp.machine_facts(ckpt)
    raw = bp.raw_disk(bins, os.path.join(ckpt, sorted(f for f in os.listdir(ckpt) if f.endswith(".safetensors"))[0]),
                      not a.no_drop)
    log(f"bench: raw disk {raw}")
    name = os.path.basename(model)
    lines = []
    for label, mib in budgets:
        bp.drop_caches(not a.no_drop)
        srv = Server(bins, toml, model, mib, max(streams), a.io, a.threads)
        log(f"bench: {label} budget {mib} MiB: server healthy in {srv.ready_seconds:.1f} s")
        try:
            burst(srv, 1, 2, a.vocab, name)  # warm-up: first-touch of the ring and slots
            solo_text = {}
            rows = []
            for n in streams:
                reps = []
                for r in range(a.repeats):
                    m0 = metrics(srv.base)
                    wall, toks, texts = burst(srv, n, a.gen, a.vocab, name)
                    m1 = metrics(srv.base)
                    d = {k: metric(m1, k) - metric(m0, k) for k in
                         ("k3_steps_total", "k3_step_seconds_sum", "k3_step_trunk_bytes_total",
                          "k3_step_expert_bytes_total", "k3_step_experts_total", "k3_step_rows_total",
                          "k3_bytes_read_total")}
                    reps.append(dict(wall=wall, toks=toks, tps=toks / wall, **d))
                    for i, t in enumerate(texts):
                        if n == 1:
                            solo_text.setdefault(i, t)
                    if n > 1 and 0 in solo_text and texts[0] != solo_text[0]:
                        raise SystemExit(f"bench: stream 0's text differs at {n} streams: batching changed tokens")
                rows.append((n, reps))
                log(f"bench: {label} {n} streams: {statistics.median(x['tps'] for x in reps):.3f} tok/s")
        finally:
            srv.stop()
        base_tps = statistics.median(x["tps"] for x in rows[0][1])
        one = rows[0][1]
        one_rate = statistics.median(x["k3_bytes_read_total"] / x["k3_step_seconds_sum"] for x in one
                                     if x["k3_step_seconds_sum"] > 0) if one else 0
        lines += [f"### {label} budget {mib} MiB", "",
                  "| streams | tok/s (median) | x 1 stream | steps | rows/step | experts/step (union) | MB used/step | MB read/step | s/step | s/step ÷ (read bytes at the 1-stream rate) |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for n, reps in rows:
            tps = statistics.median(x["tps"] for x in reps)
            steps = statistics.median(x["k3_steps_total"] for x in reps)
            per = lambda key: statistics.median(x[key] / max(1, x["k3_steps_total"]) for x in reps)  # noqa: E731
            rows_ = per("k3_step_rows_total")
            exp = per("k3_step_experts_total")
            used = (per("k3_step_trunk_bytes_total") + per("k3_step_expert_bytes_total")) / 1e6
            read = per("k3_bytes_read_total") / 1e6
            sps = per("k3_step_seconds_sum")
            cost = sps / (read * 1e6 / one_rate) if one_rate > 0 and read > 0 else float("nan")
            lines.append(f"| {n} | {tps:.3f} | {tps / base_tps:.2f} | {steps:.0f} | {rows_:.2f} | {exp:.0f} | "
                         f"{used:.1f} | {read:.1f} | {sps:.3f} | {cost:.2f} |")
        lines.append("")
    head = [f"# Server benchmark ({datetime.date.today()})", "",
            f"Checkpoint {ckpt} ({a.layers} layers at real K3 geometry, {a.experts} experts per layer), "
            f"gen {a.gen} per stream, {a.repeats} repeats, io {a.io}, max_batch {max(streams)}.",
            f"Machine: {facts}.", f"Raw disk: {raw}. The disk is virtual and cached by its host.", ""]
    text = "\n".join(head + lines)
    print(text)
    if a.report:
        with open(a.report, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
