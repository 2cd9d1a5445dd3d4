#!/usr/bin/python3
"""Tokenizer speed: k3 against the tiktoken npm package (WASM), same texts, same run. Not a test.

    tests/bench/bench_tokenizer.py BUILD_DIR [--seconds S] [--repeats R]

1. In-process encode throughput (bench_tokenizer and `tiktoken_ref.cjs bench`, one core each
   with taskset when available): MB/s per CPU-second of the encoding thread/process, median
   of R repeats of S seconds, on three texts made by tests/tokenizer/make_big_text.py:
   code (4 MB of Python standard-library source, ASCII), nonlatin (0.4 MB of vim tutor
   translations: Bulgarian, Greek, Japanese, Korean, Russian, Ukrainian, Vietnamese,
   Chinese) and mixed (licenses, C headers and the multilingual parity corpus).
2. Whole process on the code text: `k3-tokenizer encode --vocab DIR --file F` against
   `node tiktoken_ref.cjs print F` (both print the ids comma-separated), minus the same
   command on an empty file (start-up and vocabulary load), median of R runs each, CPU time
   (user + sys of the child) and wall time. The outputs are compared byte for byte.

The machine may be shared: CPU time counts other jobs less than wall time does, medians drop
disturbed repeats, and both sides are measured interleaved in the same invocation so that
the ratios compare like with like."""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOKDIR = os.path.normpath(os.path.join(HERE, "..", "tokenizer"))


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def parse_rate(line):
    f = line.split()
    return float(f[f.index("MB/s") + 1]), float(f[f.index("wall_MB/s") + 1])


def timed(cmd, out_path):
    """CPU seconds (user + sys of the child) and wall seconds of one run, stdout to a file."""
    with open(out_path, "wb") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench_tokenizer.py: {' '.join(cmd)} failed")
    return ru.ru_utime + ru.ru_stime, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=2.0, help="per in-process repeat")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    work = os.path.join(build, "testdata", "tokenizer-bench")
    os.makedirs(work, exist_ok=True)
    run(["sh", os.path.join(TOKDIR, "setup.sh")])
    vocab = os.path.join(work, "vocab")
    if not os.path.isfile(os.path.join(vocab, "specials.json")):
        run(["/usr/bin/python3", os.path.join(TOKDIR, "make_vocab.py"), os.path.join(TOKDIR, "node_modules"), vocab])
    texts = {}
    for kind in ("python", "nonlatin", "mixed"):
        path = os.path.join(work, f"{kind}.txt")
        run(["/usr/bin/python3", os.path.join(TOKDIR, "make_big_text.py"), path, "--kind", kind],
            stdout=subprocess.DEVNULL)
        texts[kind] = path
    empty = os.path.join(work, "empty.txt")
    open(empty, "wb").close()
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    bench = os.path.join(build, "bin", "bench_tokenizer")
    cli = os.path.join(build, "bin", "k3-tokenizer")
    node = ["node", os.path.join(TOKDIR, "tiktoken_ref.cjs")]
    s, r = str(a.seconds), str(a.repeats)
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")

    print("\n== in-process encode, MB/s per CPU-second (median of %d x %.1f s); wall clock in ()" % (a.repeats, a.seconds))
    names = {"python": "code (Python stdlib, ASCII)", "nonlatin": "non-Latin (vim tutors)", "mixed": "mixed"}
    for kind, path in texts.items():
        ours = run(pin + [bench, vocab, path, s, r], capture_output=True, text=True).stdout.strip()
        ref = run(pin + node + ["bench", path, s, r], capture_output=True, text=True, cwd=TOKDIR).stdout.strip()
        (oc, ow), (rc, rw) = parse_rate(ours), parse_rate(ref)
        print(f"{names[kind]:30s} {os.path.getsize(path) / 1e6:5.2f} MB  k3 {oc:7.1f} ({ow:6.1f})  "
              f"npm {rc:6.2f} ({rw:5.2f})  ratio {oc / rc:5.1f}x")
        print(f"    k3:  {ours}\n    npm: {ref}")

    print("\n== whole process on the code text, minus an empty file (median of %d runs each)" % a.repeats)
    code = texts["python"]
    k3_out, npm_out = os.path.join(work, "k3.ids"), os.path.join(work, "npm.ids")
    runs = {k: [] for k in ("k3", "k3_empty", "npm", "npm_empty")}
    for _ in range(a.repeats):  # interleaved, so a burst of other load hits both sides
        runs["k3"].append(timed(pin + [cli, "encode", "--vocab", vocab, "--file", code], k3_out))
        runs["k3_empty"].append(timed(pin + [cli, "encode", "--vocab", vocab, "--file", empty], os.devnull))
        runs["npm"].append(timed(pin + node + ["print", code], npm_out))
        runs["npm_empty"].append(timed(pin + node + ["print", empty], os.devnull))
    with open(k3_out, "rb") as f1, open(npm_out, "rb") as f2:
        same = f1.read() == f2.read()
    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in runs.items()}
    for i, what in enumerate(("CPU", "wall")):
        k3_t = med["k3"][i] - med["k3_empty"][i]
        npm_t = med["npm"][i] - med["npm_empty"][i]
        print(f"{what:4s}: k3 {med['k3'][i]:.3f} - {med['k3_empty'][i]:.3f} = {k3_t:.3f} s "
              f"({os.path.getsize(code) / max(k3_t, 1e-9) / 1e6:.1f} MB/s);  "
              f"npm {med['npm'][i]:.3f} - {med['npm_empty'][i]:.3f} = {npm_t:.3f} s;  "
              f"ratio {npm_t / max(k3_t, 1e-9):.1f}x")
    print(f"ids identical: {'yes' if same else 'NO'}")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
