#!/usr/bin/python3
"""k3-server's peak memory under load: the measurements behind common/plan/server_memory.h.
Not a test: it prints numbers (and appends them to --report).

    bench_server_peak.py BUILD_DIR [--report tests/bench/results/FILE.md]

Each scenario starts a fresh `k3-launch --serve` on the bundled demo model (models/k3-demo-tiny,
its tokenizer) and reads k3-server's /proc/PID/status: VmHWM (peak resident), RssAnon,
RssFile, RssShmem and Threads (k3-server maps no arena, so its VmHWM is private memory).

- idle: after /health is 200 (the process overhead and its threads' first pages);
- body SHAPE: one request whose body is max_body_bytes of one JSON shape (token ids, one long
  string, many chat messages, an ignored field of nested arrays, of 60-deep blocks within the
  parse's depth bound, of empty arrays or objects), then the growth of VmHWM over
  idle per body byte (the body as read, its JSON tree, the prompt);
- bodies: http_threads connections at once, each with a max_body_bytes body of small ids in an
  ignored field (every request valid: 200);
- load: max_batch + queue_size requests at once, half streamed, every one with logprobs 20,
  ignore_eos and max_tokens filling the context; VmHWM over idle per held request and context
  position.
"""
import argparse
import datetime
import http.client
import json
import os
import platform
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pipeline"))
from proc_util import free_port  # noqa: E402  (the tests' one helper)
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(ROOT, "models", "k3-demo-tiny")
NAME = "k3-demo-tiny"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem"):
                out[k] = int(v.split()[0]) * 1024
            elif k == "Threads":
                out[k] = int(v)
    return out


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def post(port, body, timeout=600):
    """(status, response bytes) of one POST /v1/completions."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


class Serve:
    def __init__(self, bin_dir, tmp, context, max_batch, queue, max_body, http_threads=0):
        self.port = free_port()
        toml = os.path.join(tmp, "peak-%d.toml" % self.port)
        with open(toml, "w") as f:
            f.write('model = "%s"\ntokenizer = "%s"\nbudget = "2G"\ncontext = %d\nthreads = 1\n' % (MODEL, MODEL, context))
        argv = [os.path.join(bin_dir, "k3-launch"), toml, "--serve", "127.0.0.1:%d" % self.port,
                "--max-batch", str(max_batch), "--queue-size", str(queue), "--max-body-bytes", str(max_body)]
        if http_threads:
            argv += ["--http-threads", str(http_threads)]
        self.err = open(os.path.join(tmp, "peak-%d.err" % self.port), "wb")
        self.p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.err)
        deadline = time.time() + 120
        while True:
            assert self.p.poll() is None, "k3-launch --serve exited %s" % self.p.returncode
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            assert time.time() < deadline, "no /health 200"
            time.sleep(0.2)
        self.server = [c for c in children(self.p.pid) if os.readlink("/proc/%d/exe" % c).endswith("k3-server")][0]
        time.sleep(0.5)
        self.idle = status(self.server)

    def stop(self):
        self.p.send_signal(2)
        self.p.wait(timeout=60)
        self.err.close()


def body_of(shape, size):
    """A valid /v1/completions body of about `size` bytes (never more)."""
    head = '{"model": "%s", "max_tokens": 1, "prompt": ' % NAME
    if shape == "ids":  # the prompt itself: far more ids than the context holds (a 400)
        n = (size - len(head) - 4) // 2
        return (head + "[" + ",".join(["1"] * n) + "]}").encode()
    if shape == "string":  # one long text prompt (a 400 once encoded: longer than the context)
        n = size - len(head) - 4
        return (head + '"' + "a" * n + '"}').encode()
    if shape == "ignored-ids":  # a valid request padded with an ignored field of small ids
        pre = head + '[1, 2, 3], "pad": ['
        n = (size - len(pre) - 4) // 2
        return (pre + ",".join(["0"] * n) + "]}").encode()
    if shape == "nested":  # an ignored field of nested arrays, the densest JSON tree per byte
        pre = head + '[1, 2, 3], "pad": '
        n = (size - len(pre) - 2) // 2
        return (pre + "[" * n + "]" * n + "}").encode()
    if shape == "deep-blocks":  # nested arrays within the parse's depth bound (64), side by side
        pre = head + '[1, 2, 3], "pad": ['
        block = "[" * 60 + "]" * 60
        n = (size - len(pre) - 4) // (len(block) + 1)
        return (pre + ",".join([block] * n) + "]}").encode()
    if shape == "empties":  # an ignored field of empty arrays, one tree node per 3 bytes
        pre = head + '[1, 2, 3], "pad": ['
        n = (size - len(pre) - 4) // 3
        return (pre + ",".join(["[]"] * n) + "]}").encode()
    if shape == "objects":  # an ignored field of empty objects
        pre = head + '[1, 2, 3], "pad": ['
        n = (size - len(pre) - 4) // 3
        return (pre + ",".join(["{}"] * n) + "]}").encode()
    if shape == "messages":  # chat: many one-letter messages
        one = '{"role": "user", "content": "a"}'
        pre = '{"model": "%s", "max_tokens": 1, "messages": [' % NAME
        n = (size - len(pre) - 4) // (len(one) + 1)
        return (pre + ",".join([one] * n) + "]}").encode()
    raise ValueError(shape)


def post_path(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--report")
    ap.add_argument("--max-body", type=int, default=1 << 20)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--scenarios", default="idle,body,bodies,load")
    args = ap.parse_args()
    bin_dir = os.path.join(args.build, "bin")
    tmp = tempfile.mkdtemp(prefix="k3-server-peak-")
    lines = []

    def report(s):
        log(s)
        lines.append(s)

    mib = 1 << 20
    todo = args.scenarios.split(",")
    # idle
    s = Serve(bin_dir, tmp, args.context, 1, 16, args.max_body)
    report("idle (max_batch 1, queue 16, 21 connection threads): VmHWM %.1f MiB, RssAnon %.1f MiB, RssFile %.1f MiB, "
           "Threads %d" % (s.idle["VmHWM"] / mib, s.idle["RssAnon"] / mib, s.idle["RssFile"] / mib, s.idle["Threads"]))
    s.stop()
    # one body of each shape
    for shape in ("ids", "string", "ignored-ids", "nested", "deep-blocks", "empties", "objects",
                  "messages") if "body" in todo else ():
        s = Serve(bin_dir, tmp, args.context, 1, 16, args.max_body)
        body = body_of(shape, args.max_body)
        path = "/v1/chat/completions" if shape == "messages" else "/v1/completions"
        code, _ = post_path(s.port, path, body)
        st = status(s.server)
        grow = st["VmHWM"] - s.idle["VmHWM"]
        report("body %-11s %7d bytes -> %d; VmHWM +%.1f MiB over idle = %.1f x the body" %
               (shape, len(body), code, grow / mib, grow / len(body)))
        s.stop()
    # every connection thread at once with a max-size body
    if "bodies" in todo:
        bodies(bin_dir, tmp, args, report)
    if "load" in todo:
        load(bin_dir, tmp, args, report)
    if args.report:
        with open(args.report, "a") as f:
            f.write("\n".join(["", "bench_server_peak.py (%s, %s):" % (datetime.date.today(), platform.node()), ""] +
                              ["    " + x for x in lines]) + "\n")


def bodies(bin_dir, tmp, args, report):
    mib = 1 << 20
    s = Serve(bin_dir, tmp, args.context, 1, 16, args.max_body)
    body = body_of("ignored-ids", args.max_body)
    codes = []
    ts = [threading.Thread(target=lambda: codes.append(post(s.port, body)[0])) for _ in range(21)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    st = status(s.server)
    grow = st["VmHWM"] - s.idle["VmHWM"]
    report("bodies: 21 connections x %d bytes at once -> %s; VmHWM +%.1f MiB = %.1f x one body per connection" %
           (len(body), sorted(set(codes)), grow / mib, grow / 21 / len(body)))
    s.stop()


def load(bin_dir, tmp, args, report):
    """max_batch + queue_size requests filling the context, with logprobs 20 and without."""
    mib = 1 << 20
    for logprobs in (20, 0):
        load_one(bin_dir, tmp, args, report, logprobs)


def load_one(bin_dir, tmp, args, report, logprobs):
    mib = 1 << 20
    max_batch, queue = 4, 8
    s = Serve(bin_dir, tmp, args.context, max_batch, queue, args.max_body)
    results = []

    def one(i):
        req = {"model": NAME, "prompt": [1 + i, 2, 3, 4], "max_tokens": args.context - 4, "ignore_eos": True,
               "stream": i % 2 == 0}
        if logprobs:
            req["logprobs"] = logprobs
        t0 = time.time()
        code, data = post(s.port, json.dumps(req).encode())
        results.append((code, len(data), time.time() - t0))

    n = max_batch + queue
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    st = status(s.server)
    grow = st["VmHWM"] - s.idle["VmHWM"]
    ok = sum(1 for c, _, _ in results if c == 200)
    report("load: %d requests at once (max_batch %d, queue %d), context %d, logprobs %d, half streamed -> %d x 200, "
           "%d x 429 in %.0f s; responses up to %.1f MiB; VmHWM %.1f MiB, +%.1f MiB over idle = %.0f bytes per "
           "answered request per position" %
           (n, max_batch, queue, args.context, logprobs, ok, n - ok, time.time() - t0,
            max(b for _, b, _ in results) / mib, st["VmHWM"] / mib, grow / mib, grow / max(ok, 1) / args.context))
    s.stop()


if __name__ == "__main__":
    main()
