#!/usr/bin/python3
"""Where the memory floor goes: each process's measured peak next to the plan's
estimate for it, in a run at the plan's floor. Not a test: it prints a table.

    bench_floor_peaks.py BIN_DIR [--model DIR] [--toml FILE] [--ids 1,5,9] [--gen 5]
                         [--budget BYTES] [--cap] [--threads N] [--tokenizer DIR | --make-vocab N]

Without --model/--toml it generates the checkpoint test_budget_cgroup.py uses (tiny preset,
13 layers, 64 experts, vocabulary 8192) in a temporary directory. The budget is the plan's
floor (from the dry run's exit-6 message) unless --budget is given. With --cap, k3-launch runs
in a cgroup-v1 memory cgroup limited to the budget (only the launcher and its children join;
the cgroup is removed afterwards). --threads sets compute's threads (default 1; the plan's
estimates are for threads = cores). --make-vocab N writes a tokenizer of exactly N ids (N - 256
ranks: the 256 bytes, then merges of two earlier ranks up to 16 bytes long, deterministic; then
the 256 added tokens, as K3 places them) into the temporary directory and runs with it, so the
tokenizer process can be measured at the release's 163,840 ids without downloading anything.

Every process of the run is sampled every 10 ms from /proc/PID/status. Per process it reports
the peak RssAnon (heap, stacks, private mappings), peak RssFile (code and libraries mapped
from files), peak RssShmem (arena pages touched) and the last VmHWM seen. The plan's estimate
for a process is its regions: compute = kda-state + mla-cache + scratch (+ spec-rollback) +
one process-overhead share; tokenizer = tables + one share; trunk reader and expert fetcher =
one share each. "private" = RssAnon + RssFile is what the process needs beyond the arenas,
which the plan counts in its shm regions.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cgroup_cap  # noqa: E402  (the hard memory cap, --cap)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GENERATOR = os.path.join(ROOT, "tests", "generator", "make_checkpoint.py")
PY = "/usr/bin/python3"
MIB = 1 << 20


def status(pid):
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    out[k] = int(v.split()[0]) * 1024
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            out["comm"] = os.path.basename(f.read().split(b"\0")[0].decode() or "?")
    except OSError:
        return None
    return out


def descendants(root):
    """root and every process below it (from /proc/*/stat parent links)."""
    children = {}
    for st in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(st) as f:
                text = f.read()
        except OSError:
            continue
        pid = int(text.split(" ", 1)[0])
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def make_vocab(out_dir, n_ids):
    """A K3-format tokenizer directory with exactly n_ids ids (see the module doc)."""
    import base64
    import random
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(16)
    ranks = [bytes([b]) for b in range(256)]
    seen = set(ranks)
    while len(ranks) < n_ids - 256:
        t = ranks[rng.randrange(len(ranks))] + ranks[rng.randrange(len(ranks))]
        if len(t) <= 16 and t not in seen:
            seen.add(t)
            ranks.append(t)
    with open(os.path.join(out_dir, "tiktoken.model"), "w") as f:
        for i, t in enumerate(ranks):
            f.write("%s %d\n" % (base64.b64encode(t).decode(), i))
    names = {0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
             254: "[UNK]", 255: "[PAD]"}
    first = len(ranks)
    added = {str(first + k): {"content": names.get(k, "<|reserved_token_%d|>" % k), "special": True}
             for k in range(256)}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"added_tokens_decoder": added}, f)
    return sum(len(t) for t in ranks) / len(ranks)


def parse_plan(text):
    """region -> bytes from the dry run's table (sizes printed as B, MiB or GiB)."""
    regions = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] in ("compute", "tokenizer", "all", "shm", "fetcher"):
            value, unit = float(parts[2]), parts[3]
            mult = {"B": 1, "MiB": MIB, "GiB": 1 << 30}[unit]
            regions[parts[1]] = int(value * mult)
    return regions


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--model")
    ap.add_argument("--toml")
    ap.add_argument("--tokenizer", default="")
    ap.add_argument("--ids", default="1,5,9,8000,77,3,4095,42")
    ap.add_argument("--gen", type=int, default=5)
    ap.add_argument("--budget", type=int, default=0)
    ap.add_argument("--cap", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--io", default="pread")
    ap.add_argument("--make-vocab", type=int, default=0)
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="k3-floor-peaks-")
    try:
        if a.make_vocab:
            a.tokenizer = os.path.join(tmp, "vocab")
            avg = make_vocab(a.tokenizer, a.make_vocab)
            print("tokenizer: %d ids generated (%d ranks, %.1f bytes per rank on average)" %
                  (a.make_vocab, a.make_vocab - 256, avg))
        toml = a.toml
        if not toml:
            model = a.model
            if not model:
                model = os.path.join(tmp, "ck")
                subprocess.run([PY, GENERATOR, model, "--preset", "tiny", "--layers", "13", "--experts", "64",
                                "--vocab", "8192"], check=True, capture_output=True)
            toml = os.path.join(tmp, "run.toml")
            with open(toml, "w") as f:
                f.write('model = "%s"\nio = "%s"\ngen = %d\nthreads = %d\n' % (os.path.abspath(model), a.io, a.gen,
                                                                     a.threads))
                if a.tokenizer:
                    f.write('tokenizer = "%s"\n' % os.path.abspath(a.tokenizer))
        launch = os.path.join(a.bin, "k3-launch")
        budget = a.budget
        if not budget:
            r = subprocess.run([launch, toml, "--budget", "1", "--dry-run"], capture_output=True, text=True)
            budget = int(r.stderr.split("(")[1].split(" bytes")[0])
        dry = subprocess.run([launch, toml, "--budget", str(budget), "--dry-run"], capture_output=True, text=True,
                             check=True)
        plan = parse_plan(dry.stdout)
        report = os.path.join(tmp, "report.json")
        cmd = [launch, toml, "--budget", str(budget), "--ids", a.ids, "--gen", str(a.gen), "--out", report]
        cg = None
        if a.cap:
            cg = cgroup_cap.create("k3-floor-peaks-%d" % os.getpid(), budget)
            cmd = cgroup_cap.wrap(cg, cmd)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        peaks = {}
        while p.poll() is None:
            for pid in descendants(p.pid):
                s = status(pid)
                if not s or "RssAnon" not in s:
                    continue
                key = (s["comm"], pid)
                pk = peaks.setdefault(key, {"RssAnon": 0, "RssFile": 0, "RssShmem": 0, "VmHWM": 0, "private": 0})
                for k in ("RssAnon", "RssFile", "RssShmem", "VmHWM"):
                    pk[k] = max(pk[k], s[k])
                pk["private"] = max(pk["private"], s["RssAnon"] + s["RssFile"])
            time.sleep(0.01)
        out, err = p.communicate()
        usage = None
        if cg:
            usage = cgroup_cap.max_usage(cg)
            cgroup_cap.remove(cg)
        if p.returncode != 0:
            sys.stderr.write(err[-3000:])
            sys.exit("k3-launch failed with exit %d" % p.returncode)
        rep = json.load(open(report))
        # The overhead region is one share per process the plan counts (the table's note).
        import re
        m = re.search(r"process-overhead.*?(\d+) processes", dry.stdout)
        share = plan.get("process-overhead", 0) // (int(m.group(1)) if m else 4)
        estimate = {
            "k3-compute": plan.get("kda-state", 0) + plan.get("mla-cache", 0) + plan.get("scratch", 0) +
            plan.get("spec-rollback", 0) + share,
            "k3-tokenizer": plan.get("tables", 0) + share,
            "k3-trunk-reader": share,
            "k3-expert-fetcher": share,
            "k3-launch": share,
        }
        print("budget %d (%.1f MiB), plan regions:" % (budget, budget / MIB))
        for k, v in plan.items():
            print("  %-17s %10.1f MiB" % (k, v / MIB))
        print("%-18s %9s %9s %9s %9s %9s %11s" % ("process", "anon", "file", "private", "shmem", "VmHWM",
                                                 "plan est."))
        for (comm, pid), pk in sorted(peaks.items()):
            est = estimate.get(comm)
            print("%-18s %9.1f %9.1f %9.1f %9.1f %9.1f %11s" % (
                comm, pk["RssAnon"] / MIB, pk["RssFile"] / MIB, pk["private"] / MIB, pk["RssShmem"] / MIB,
                pk["VmHWM"] / MIB, "%.1f" % (est / MIB) if est is not None else "-"))
        print("(MiB; peaks sampled every 10 ms; private = RssAnon + RssFile)")
        print("launcher report peak_memory_total_bytes %.1f MiB" % (rep.get("peak_memory_total_bytes", 0) / MIB))
        if usage is not None:
            print("cgroup memory.max_usage_in_bytes %.1f MiB (limit %.1f MiB)" % (usage / MIB, budget / MIB))
        print("ids: " + out.strip())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
