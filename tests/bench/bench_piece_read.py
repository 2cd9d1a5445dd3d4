#!/usr/bin/python3
"""Read rate against trunk piece size (docs/trunk-pieces.md §5). Not a test.

    bench_piece_read.py BIN_DIR [--ckpt DIR] [--layers 0,1,2,3] [--io direct,uring] [--inflight 4]
                        [--pieces 1,4,16,64,256] [--read-ahead-mib 128] [--rounds 3]
                        [--drain-pieces 1,4,16] [--report FILE]

Reads the trunk runs of the real-geometry checkpoint (tests/bench/bench_pipeline.py makes it;
default /work/ckpt/bench-ckpt-L4-E64-V32768) through the trunk reader's read path:
k3-bench-piece-read drives svc::ReadWorker over io::BlockReader with --io and --inflight,
cutting every layer's run into pieces of each size, with a ring of
max(2, 1 + ceil(read_ahead / piece)) slots (the plan's rule, §5), and whole layers (2 slots,
today's ring). --drain-pieces also runs those sizes one piece at a time (the queue empties at
every piece boundary, as the read worker did before it claimed chunks across jobs). Every run
starts with the page cache dropped (root). Rounds are interleaved (every configuration once
per round, the order rotated), and each round also measures the raw disk with k3-disk-bench
on the largest shard. Prints medians and each median's ratio to the whole-layer median of the
same backend. The disk here is virtual and cached by its host: "cold" is only cold in the VM.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time

MIB = 1 << 20


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def drop_caches():
    subprocess.run(["sync"], check=True)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def trunk_runs(ckpt):
    """{layer: (shard path, offset, length)}: [first, last) byte of the layer's non-expert tensors."""
    with open(os.path.join(ckpt, "model.safetensors.index.json")) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    runs = {}
    for s in shards:
        p = os.path.join(ckpt, s)
        with open(p, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            hdr = json.loads(f.read(n))
        base = 8 + n
        for name, t in hdr.items():
            if name == "__metadata__" or ".layers." not in name or ".experts." in name:
                continue
            layer = int(name.split(".layers.")[1].split(".")[0])
            b, e = t["data_offsets"]
            prev = runs.get(layer)
            lo, hi = base + b, base + e
            if prev:
                assert prev[0] == p, "layer %d split across shards" % layer
                lo, hi = min(lo, prev[1]), max(hi, prev[1] + prev[2])
            runs[layer] = (p, lo, hi - lo)
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin")
    ap.add_argument("--ckpt", default="/work/ckpt/bench-ckpt-L4-E64-V32768")
    ap.add_argument("--layers", default="", help="layers to read (default all)")
    ap.add_argument("--io", default="direct,uring")
    ap.add_argument("--inflight", type=int, default=4)
    ap.add_argument("--pieces", default="1,4,16,64,256", help="piece sizes in MiB")
    ap.add_argument("--read-ahead-mib", type=int, default=128)
    ap.add_argument("--drain-pieces", default="", help="piece sizes (MiB) also run one piece at a time")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--report", help="append the markdown table here")
    a = ap.parse_args()

    runs = trunk_runs(a.ckpt)
    layers = [int(x) for x in a.layers.split(",")] if a.layers else sorted(runs)
    ranges = ["%s:%d:%d" % runs[l] for l in layers]
    total = sum(runs[l][2] for l in layers)
    biggest = max(runs.values(), key=lambda r: os.path.getsize(r[0]))[0]
    tool = os.path.join(a.bin, "k3-bench-piece-read")
    disk = os.path.join(a.bin, "k3-disk-bench")

    configs = []  # (label, io, args)
    for io in a.io.split(","):
        for mib in [int(x) for x in a.pieces.split(",")]:
            slots = max(2, 1 + -(-a.read_ahead_mib // mib))
            configs.append(("%s %d MiB x %d" % (io, mib, slots), io, ["--piece", str(mib * MIB), "--slots", str(slots)]))
        configs.append(("%s layer x 2" % io, io, ["--piece", "0", "--slots", "2"]))
        for mib in [int(x) for x in a.drain_pieces.split(",") if x]:
            configs.append(("%s %d MiB drained" % (io, mib), io, ["--piece", str(mib * MIB), "--drain"]))
    log("bench_piece_read: layers %s, %.2f GB of trunk per run, %d configurations x %d rounds" %
        (layers, total / 1e9, len(configs), a.rounds))
    results = {c[0]: [] for c in configs}
    overlap = {}
    raw = []
    dropped = True
    for rnd in range(a.rounds):
        order = configs[rnd % len(configs):] + configs[:rnd % len(configs)]
        for label, io, args in order:
            dropped &= drop_caches()
            cmd = ["nice", "-n", "0", tool, "--io", io, "--inflight", str(a.inflight)] + args
            for r in ranges:
                cmd += ["--range", r]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit("bench_piece_read: %s failed (exit %d): %s" % (label, p.returncode, p.stderr.strip()))
            j = json.loads(p.stdout)
            results[label].append(j["mb_s"])
            overlap[label] = max(overlap.get(label, 0), j["max_jobs_in_flight"])
            log("  round %d  %-24s %7.1f MB/s  (%d pieces, %.2f s, jobs in flight <= %d)" %
                (rnd + 1, label, j["mb_s"], j["pieces"], j["seconds"], j["max_jobs_in_flight"]))
        dropped &= drop_caches()
        p = subprocess.run([disk, biggest, "--backend", "direct", "--depth", "8"], capture_output=True, text=True)
        mbs = float(p.stdout.rsplit(",", 1)[1].split()[0]) if p.returncode == 0 else float("nan")
        raw.append(mbs)
        log("  round %d  raw disk (k3-disk-bench direct, depth 8, 4 MiB) %.1f MB/s" % (rnd + 1, mbs))

    load = open("/proc/loadavg").read().split()[:3]
    lines = ["", "Trunk of %s, layers %s (%.2f GB per run), --inflight %d, read-ahead %d MiB, %d rounds, "
             "page cache dropped before every run: %s; load average %s. Virtual disk cached by its host: "
             "'cold' is only cold inside the VM." % (a.ckpt, ",".join(map(str, layers)), total / 1e9, a.inflight,
                                                    a.read_ahead_mib, a.rounds, dropped, " ".join(load)),
             "", "| configuration | median MB/s | vs whole layers | runs (MB/s) | max jobs in flight |",
             "|---|---:|---:|---|---:|"]
    for io in a.io.split(","):
        base = statistics.median(results["%s layer x 2" % io])
        for label, cio, _ in configs:
            if cio != io:
                continue
            m = statistics.median(results[label])
            lines.append("| %s | %.1f | %.2f | %s | %d |" % (label, m, m / base,
                                                             ", ".join("%.0f" % x for x in results[label]),
                                                             overlap[label]))
    lines.append("| raw disk (k3-disk-bench direct, depth 8, 4 MiB chunks) | %.1f | | %s | |" %
                 (statistics.median(raw), ", ".join("%.0f" % x for x in raw)))
    text = "\n".join(lines) + "\n"
    print(text)
    if a.report:
        with open(a.report, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
