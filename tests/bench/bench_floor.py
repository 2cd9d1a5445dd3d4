#!/usr/bin/python3
"""The memory floor's proof benchmark (docs/trunk-pieces.md). Not a test.

    bench_floor.py BUILD_DIR [--bin DIR] [--cache /work/ckpt] [--points 2G:2G,5.5G:6G,8G:8.5G]
                   [--gen 8] [--repeats 3] [--io direct] [--threads N] [--report FILE]

On the real-geometry checkpoint (bench_pipeline.py's: real K3 layer geometry, 4 layers, 64
experts, vocabulary 32768; generated once into --cache, default /work/ckpt, ~10 GB) it runs
k3-launch under a hard cgroup-v1 memory cap for each BUDGET:CAP point, the page cache dropped
before every timed run, repeats interleaved across the points, and prints per point the medians
of s/token and of the bytes read per token (trunk streamed + experts, from the run report: the
services' bytes_read over the forward passes), the plan's pinned layers and ring, the cgroup's
peak usage and OOM kills, and whether the ids equal standalone k3-compute's. Then the read
efficiency: (bytes/token / s/token) at the first point over the same at the second
(goal >= 0.9), and the raw disk MB/s measured in the same run. A point the plan refuses (exit 6,
budget below the floor) is reported as refused with the plan's message, and the ratio as n/a.
The disk is virtual and cached by its host: "cold" is only cold inside the VM.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_pipeline as bp  # noqa: E402  (checkpoint, cache dropping, raw disk, per-run summary)
import cgroup_cap  # noqa: E402  (the hard memory cap per point)


def size(text):
    """'5.5G' / '512M' / bytes -> bytes (binary units, as the launcher's --budget)."""
    t = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(float(t[:-1] if mult > 1 else t) * mult)


def run_capped(cmd, cap, timeout):
    """cmd in a fresh cgroup limited to `cap` bytes (only it and its children join).
    Returns (returncode, stdout, stderr, max usage, OOM kills)."""
    cg = cgroup_cap.create("k3-bench-floor-%d-%d" % (os.getpid(), int(time.time() * 1000)), cap)
    try:
        p = subprocess.run(cgroup_cap.wrap(cg, cmd), capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, cgroup_cap.max_usage(cg), cgroup_cap.oom_kills(cg)
    finally:
        cgroup_cap.remove(cg)


def plan_line(text, key):
    for line in text.splitlines():
        if key in line:
            return " ".join(line.split())
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build_dir")
    ap.add_argument("--bin")
    ap.add_argument("--cache", default="/work/ckpt", help="where the real-geometry checkpoint is (or is made)")
    ap.add_argument("--points", default="2G:2G,5.5G:6G,8G:8.5G", help="BUDGET:CAP,...")
    ap.add_argument("--gen", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--io", default="direct")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="compute threads (default: cores)")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--report", help="append the markdown results here")
    ap.add_argument("--coded", action="store_true",
                    help="every point also from the checkpoint's coded trunk (bench_pipeline.py's, packed once "
                         "beside it), interleaved with the uncoded run; layers streamed in pieces read the release")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_floor: needs root (cgroup caps, dropping the page cache)")
    bins = os.path.abspath(a.bin or os.path.join(a.build_dir, "bin"))
    ckpt = bp.ensure_checkpoint(a.cache, 4, 64, 32768)
    w = bp.weight_bytes(ckpt)
    runs = os.path.join(os.path.abspath(a.build_dir), "bench-floor-runs")
    os.makedirs(runs, exist_ok=True)
    toml = os.path.join(runs, "floor.toml")
    with open(toml, "w") as f:
        f.write('model = "%s"\nio = "%s"\ngen = %d\ncontext = 4096\nprefill_chunk = 64\nthreads = %d\n' %
                (ckpt, a.io, a.gen, a.threads))
    launch = os.path.join(bins, "k3-launch")

    # Standalone ids (the reference) and the raw disk, in this run.
    p = subprocess.run([os.path.join(bins, "k3-compute"), "--standalone", ckpt, "--ids", "1", "--gen", str(a.gen),
                        "--threads", str(a.threads)], capture_output=True, text=True, timeout=a.timeout)
    if p.returncode != 0:
        sys.exit("bench_floor: standalone k3-compute failed: " + p.stderr[-2000:])
    expected = [int(x) for x in p.stdout.split()]
    biggest = max((os.path.join(ckpt, s) for s in os.listdir(ckpt) if s.endswith(".safetensors")),
                  key=os.path.getsize)
    raw = bp.raw_disk(bins, biggest, True)
    bp.log("bench_floor: standalone ids %s; raw O_DIRECT %s MB/s" % (expected, raw))

    points = []
    coded = bp.ensure_coded(bins, ckpt) if a.coded else None
    for item, mode in [(x, m) for x in a.points.split(",") for m in (("", "coded") if coded else ("",))]:
        name, cap = item.split(":")
        budget = size(name)
        extra = ["--coded-trunk", coded] if mode else []
        dry = subprocess.run([launch, toml, "--budget", str(budget), "--dry-run", "--ids", "1"] + extra,
                             capture_output=True, text=True)
        pt = dict(name=name + ("-coded" if mode else ""), budget=budget, cap=size(cap), rows=[], ids_ok=[], usage=[],
                  oom=0, refused=None, plan="", extra=extra)
        if dry.returncode != 0:
            pt["refused"] = "exit %d: %s" % (dry.returncode, dry.stderr.strip().splitlines()[-1])
            bp.log("bench_floor: %s refused by the plan (%s)" % (name, pt["refused"]))
        else:
            pt["plan"] = "; ".join(x for x in (plan_line(dry.stdout, "trunk-pinned"), plan_line(dry.stdout, "trunk-ring"),
                                               plan_line(dry.stdout, "experts")) if x)
        points.append(pt)

    for rep in range(a.repeats):
        for pt in points:
            if pt["refused"]:
                continue
            out_json = os.path.join(runs, "%s-%d.json" % (pt["name"], rep))
            cold = bp.drop_caches(True)
            load = bp.loadavg()
            cmd = ["nice", "-n", "-20", launch, toml, "--budget", str(pt["budget"]), "--ids", "1", "--gen", str(a.gen),
                   "--out", out_json] + pt["extra"]
            rc, out, err, usage, oom = run_capped(cmd, pt["cap"], a.timeout)
            pt["oom"] += oom
            if rc != 0:
                sys.exit("bench_floor: %s run %d failed (exit %d, OOM kills %d):\n%s" %
                         (pt["name"], rep + 1, rc, oom, err[-3000:]))
            with open(out_json) as f:
                r = json.load(f)
            r["_load"], r["_cold"] = load, cold
            s = bp.summarise(r, a.gen, w)
            ids = [int(x) for x in out.split()]
            pt["rows"].append(s)
            pt["ids_ok"].append(ids == expected)
            pt["usage"].append(usage)
            bp.log("bench_floor: %s #%d: %.3f s/token, %s/token read (trunk %s, experts %s), cgroup peak %.0f MiB, "
                   "ids %s, load %.2f" % (pt["name"], rep + 1, s["spt"], bp.fmt_b(s["read_per_tok"]),
                                          bp.fmt_b(s["trunk_per_tok"]), bp.fmt_b(s["expert_per_tok"]),
                                          usage / 2**20, "equal" if ids == expected else "DIFFER", s["load"]))

    with open(os.path.join(runs, "rows.json"), "w") as f:  # every run's numbers, for a later look
        json.dump([{k: v for k, v in pt.items()} for pt in points], f, indent=1)
    lines = ["", "Checkpoint %s (real K3 layer geometry, 4 layers, 64 experts), prompt one id, --gen %d, --io %s, "
             "--threads %d, context 4096, %d repeats interleaved, page cache dropped before every run; virtual disk "
             "cached by its host. Raw O_DIRECT in this run: %s / %s MB/s (1 MiB x 4 / 4 MiB x 8)." %
             (ckpt, a.gen, a.io, a.threads, a.repeats, raw.get("d4_c1M"), raw.get("d8_c4M")),
             "", "| point | budget | cap | plan | s/token (median) | runs | read/token (median) | trunk/token | "
             "experts/token | read MB/s (bytes/token / s/token) | cgroup peak MiB | OOM | ids = standalone |",
             "|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    eff = {}
    for pt in points:
        if pt["refused"]:
            lines.append("| %s | %d | %d | refused: %s | | | | | | | | | |" % (pt["name"], pt["budget"], pt["cap"],
                                                                          pt["refused"]))
            continue
        spt = bp.med(pt["rows"], "spt")
        rd = bp.med(pt["rows"], "read_per_tok")
        eff[pt["name"]] = rd / spt if spt > 0 else 0
        lines.append("| %s | %d | %d | %s | %.3f | %s | %s | %s | %s | %.0f | %.0f | %d | %s |" % (
            pt["name"], pt["budget"], pt["cap"], pt["plan"], spt, bp.joined(pt["rows"], "spt", 3), bp.fmt_b(rd),
            bp.fmt_b(bp.med(pt["rows"], "trunk_per_tok")), bp.fmt_b(bp.med(pt["rows"], "expert_per_tok")),
            eff[pt["name"]] / 1e6, max(pt["usage"]) / 2**20, pt["oom"],
            "yes" if all(pt["ids_ok"]) else "NO (%d of %d)" % (sum(pt["ids_ok"]), len(pt["ids_ok"]))))
    if coded:  # coded against uncoded, per point
        for pt in points:
            base = pt["name"][:-len("-coded")]
            if pt["name"].endswith("-coded") and not pt["refused"] and eff.get(base):
                u = [q for q in points if q["name"] == base][0]
                lines.append("Coded / uncoded s/token at %s: %.3f (trunk read/token %s against %s)" % (
                    base, bp.med(pt["rows"], "spt") / bp.med(u["rows"], "spt"), bp.fmt_b(bp.med(pt["rows"], "trunk_per_tok")),
                    bp.fmt_b(bp.med(u["rows"], "trunk_per_tok"))))
    plain = [pt for pt in points if not pt["name"].endswith("-coded")]  # the efficiency ratio: uncoded points
    first, second = plain[0]["name"], plain[1]["name"] if len(plain) > 1 else None
    if second and first in eff and second in eff and eff[second] > 0:
        ratio = "%.2f (goal >= 0.9)" % (eff[first] / eff[second])
    else:
        ratio = "n/a (%s)" % ("%s refused by the plan" % first if plain[0]["refused"] else "not measured")
    lines += ["", "Read efficiency (bytes/token / s/token) at %s over %s: %s" % (first, second, ratio),
              "Standalone ids: %s" % " ".join(map(str, expected))]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.report:
        with open(a.report, "a") as f:
            f.write(text)
    if any(not all(pt["ids_ok"]) for pt in points if not pt["refused"]):
        sys.exit("bench_floor: ids differ from standalone k3-compute")


if __name__ == "__main__":
    main()
