#!/usr/bin/env python3
"""Experts from a k3-expert-server, A/B/C: starts the server on 127.0.0.1 over the benchmark
checkpoint, writes its expert manifest (k3-model digest, timed), then alternates k3-launch runs
that read experts through the server checked against the manifest ("verified"), through the
server unchecked (--no-verify, "remote") and from the local shards ("local"), page cache
dropped before each, at a budget that reads experts during the run (default:
bench_pipeline.py's "middle"). Prints every run, then medians and the ratios remote / local
and verified / remote. Server and pipeline share this machine's cores and its disk, so this
measures the path's overhead, not a network. Not part of the test suite.

    sudo /usr/bin/python3 tests/bench/bench_remote.py build-bench [--bin DIR] [--repeats 3]
"""
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_hints as bh  # noqa: E402


def main(argv=None):
    a = bh.ab_args(__doc__, 3, argv)
    bins, ckpt, work, toml, budget = bh.ab_setup(a, "remote")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"tcp://127.0.0.1:{port}"
    server = subprocess.Popen([os.path.join(bins, "k3-expert-server"), "--model", ckpt, "--bind", endpoint,
                               "--io", a.io], stderr=subprocess.PIPE, text=True)
    print(server.stderr.readline().strip(), flush=True)
    manifest = os.path.join(work, "remote-manifest.json")
    t0 = time.monotonic()
    subprocess.run([os.path.join(bins, "k3-model"), "digest", ckpt, "--out", manifest], check=True)
    print(f"k3-model digest: {time.monotonic() - t0:.2f} s (page cache as the server left it)", flush=True)
    print(f"checkpoint {ckpt}; budget {budget} MiB; gen {a.gen}; io {a.io}; {a.repeats} rounds", flush=True)
    modes = {"verified": ["--expert-server", endpoint, "--manifest", manifest],
             "remote": ["--expert-server", endpoint, "--no-verify"], "local": []}
    rows = {m: [] for m in modes}
    ids = {}
    try:
        for _ in range(a.repeats):
            for mode, extra in modes.items():
                r = bh.one_run(bins, toml, ckpt, budget, a.gen, a.io, extra, os.path.join(work, "remote.json"), a.nice)
                fetcher = r["service_stats"]["expert-fetcher"]
                row = dict(spt=r["seconds_per_token"], wait=r["expert_wait_seconds_per_token"],
                           mb=r["expert_bytes_per_token"] / 1e6, mbs=fetcher.get("read_mb_s", 0.0))
                rows[mode].append(row)
                ids.setdefault(mode, r["generated_ids"])
                print(f"{mode:8} s/token {row['spt']:.3f}  expert wait/token {row['wait']:.3f} s  "
                      f"experts read {row['mb']:.0f} MB/token at {row['mbs']:.0f} MB/s", flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=60)
        print(err.strip().splitlines()[-1] if err.strip() else "(no server stats)")
    med = {m: {k: statistics.median(x[k] for x in rows[m]) for k in rows[m][0]} for m in rows}
    print()
    print("| experts from | s/token (median) | expert wait/token | experts read/token | fetcher read MB/s |")
    print("|---|---|---|---|---|")
    for m in modes:
        print(f"| {m} | {med[m]['spt']:.3f} | {med[m]['wait']:.3f} s | {med[m]['mb']:.0f} MB | {med[m]['mbs']:.0f} |")
    same = ids["remote"] == ids["local"] == ids["verified"]
    print(f"\nratio remote / local (median s/token): {med['remote']['spt'] / med['local']['spt']:.3f}; ids identical: {same}")
    print(f"ratio verified / remote: s/token {med['verified']['spt'] / med['remote']['spt']:.3f}, "
          f"fetcher read MB/s {med['verified']['mbs'] / med['remote']['mbs']:.3f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
