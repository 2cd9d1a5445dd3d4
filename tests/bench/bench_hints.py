#!/usr/bin/env python3
"""Next-layer expert hints, A/B: k3-launch at a budget that reads experts during the run
(default: bench_pipeline.py's "middle" budget on its real-geometry checkpoint), alternating
runs with hints (the default) and with --no-prefetch-hints, page cache dropped before each.
Prints every run, then medians and the ratio hints / no hints. Not part of the test suite.

    sudo /usr/bin/python3 tests/bench/bench_hints.py build-bench [--bin DIR] [--repeats 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_pipeline as bp  # noqa: E402


def one_run(bins, toml, ckpt, budget_mib, gen, io, extra, out_json, nice):
    """One k3-launch run after dropping the page cache; returns its JSON report."""
    bp.drop_caches(True)
    cmd = [os.path.join(bins, "k3-launch"), toml, "--model", ckpt, "--budget", f"{budget_mib}M", "--ids", "1",
           "--gen", str(gen), "--io", io, "--out", out_json] + list(extra)
    if os.geteuid() == 0 and nice:
        cmd = ["nice", "-n", str(nice)] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench: k3-launch failed ({p.returncode}):\n{p.stderr[-3000:]}")
    with open(out_json) as f:
        return json.load(f)


def ab_args(doc, repeats, argv):
    """The command line of the A/B benchmarks (this one and bench_remote.py)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build_dir")
    ap.add_argument("--bin", help="directory of k3-launch and the services (default BUILD_DIR/bin)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--gen", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--io", default="direct")
    ap.add_argument("--budget", type=int, help="MiB (default: the middle of bench_pipeline's three)")
    ap.add_argument("--nice", type=int, default=-20)
    return ap.parse_args(argv)


def ab_setup(a, name):
    """(bins, checkpoint, work dir, TOML, budget MiB) for an A/B benchmark called `name`."""
    bins = os.path.abspath(a.bin or os.path.join(a.build_dir, "bin"))
    ckpt = bp.ensure_checkpoint(a.build_dir, a.layers, a.experts, a.vocab)
    work = os.path.join(a.build_dir, "bench-runs")
    os.makedirs(work, exist_ok=True)
    toml = os.path.join(work, name + ".toml")
    with open(toml, "w") as f:
        f.write(f'model = "{ckpt}"\nbudget = "auto"\nio = "{a.io}"\ngen = {a.gen}\nring_slots = 2\n')
    budget = a.budget or dict(bp.choose_budgets(bins, toml, ckpt, bp.weight_bytes(ckpt))[0])["middle"]
    return bins, ckpt, work, toml, budget


def main(argv=None):
    a = ab_args(__doc__, 5, argv)
    bins, ckpt, work, toml, budget = ab_setup(a, "hints")
    print(f"checkpoint {ckpt}; budget {budget} MiB; gen {a.gen}; io {a.io}; {a.repeats} pairs", flush=True)
    rows = {True: [], False: []}
    ids = {}
    for i in range(a.repeats):
        for hints in (True, False):
            r = one_run(bins, toml, ckpt, budget, a.gen, a.io, [] if hints else ["--no-prefetch-hints"],
                        os.path.join(work, "hints.json"), a.nice)
            row = dict(spt=r["seconds_per_token"], wait=r["expert_wait_seconds_per_token"],
                       mb=r["expert_bytes_per_token"] / 1e6, hit=r["expert_hit_rate"], recall=r["hint_recall"],
                       reads=r["prefetch_reads"], used=r["prefetch_used"])
            rows[hints].append(row)
            ids.setdefault(hints, r["generated_ids"])
            if r["generated_ids"] != ids[hints]:
                raise SystemExit("bench: ids changed between repeats")
            print(f"{'hints' if hints else 'none ':5} s/token {row['spt']:.3f}  expert wait/token {row['wait']:.3f} s  "
                  f"experts read {row['mb']:.0f} MB/token  hit rate {row['hit']:.3f}  recall {row['recall']:.3f}  "
                  f"read ahead {row['reads']:.0f}, used {row['used']:.0f}", flush=True)
    med = {h: {k: statistics.median(x[k] for x in rows[h]) for k in rows[h][0]} for h in rows}
    print()
    print("| | s/token (median) | expert wait/token | experts read/token | hit rate | recall | read ahead (used) |")
    print("|---|---|---|---|---|---|---|")
    for h in (True, False):
        m = med[h]
        print(f"| {'hints' if h else 'no hints'} | {m['spt']:.3f} | {m['wait']:.3f} s | {m['mb']:.0f} MB | {m['hit']:.3f} "
              f"| {m['recall']:.3f} | {m['reads']:.0f} ({m['used']:.0f}) |")
    print(f"\nratio hints / no hints (median s/token): {med[True]['spt'] / med[False]['spt']:.3f}; "
          f"ids identical: {ids[True] == ids[False]}")
    return 0 if ids[True] == ids[False] else 1


if __name__ == "__main__":
    sys.exit(main())
