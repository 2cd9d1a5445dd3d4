#!/usr/bin/python3
"""Speculative decoding benchmark, in two halves measured separately,
because the demo model is trained but small (its steps are compute-bound and cheap) and the
real-geometry checkpoint has K3's layer sizes but random weights (acceptance means nothing):

(a) Acceptance on trained text: k3-compute --standalone on the demo model, code-like and
    prose prompts, --spec 0 and --spec N: drafts verified and accepted, tokens per forward
    pass, and the wall s/token of both (median of the repeats): the speedup measured on the
    demo. The ids of --spec N must equal --spec 0 (checked).
(b) Cost of a pass: k3-launch on the real-geometry checkpoint of bench_pipeline.py at the
    streaming budget (the plan floor with --spec N: nothing pinned). A prompt of T ids in one
    chunk is exactly one forward pass over T positions (the verify path); its prefill_seconds
    against the 1-id prompt's (the same measurement) and against the median one-token decode
    step gives the cost of an N+1-position pass in single-token steps.
The prediction combines them: tokens per pass (a) / cost of a pass of the mean size (b).

    bench_spec.py BUILD_DIR [--bin DIR] [--spec 4] [--gen 96] [--repeats 3]
                  [--passes 1,2,3,5,9] [--skip-stream] [--report tests/bench/results/FILE.md]

Not a test (not in CI). Root drops the page cache before every streaming run.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import bench_pipeline as bp  # noqa: E402

DEMO = os.path.join(ROOT, "models", "k3-demo-tiny")
PROMPTS = {
    "code": ("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
             "def mul(a, b):\n    return a * b\n\ndef div(a, b):\n    return a / b\n\ndef "),
    "code-c": ("for (i = 0; i < n; i++) {\n    a[i] = b[i] + c[i];\n}\n"
               "for (i = 0; i < n; i++) {\n    d[i] = a[i] * c[i];\n}\nfor (i = 0; i < n; i++) {\n"),
    "prose": ("It was the best of times, it was the worst of times, it was the age of wisdom, "
              "it was the age of foolishness, it was the epoch of belief, it was the epoch of"),
    "prose-fortune": ("A fool and his money are soon parted. A penny saved is a penny earned. "
                      "The early bird catches the worm. Actions speak louder than"),
}


def encode(bins, text):
    p = subprocess.run([os.path.join(bins, "k3-tokenizer"), "encode", "--vocab", DEMO], input=text.encode(),
                       capture_output=True, check=True)
    return p.stdout.decode().strip()


def standalone(bins, ids, gen, spec, out_json, threads):
    cmd = [os.path.join(bins, "k3-compute"), "--standalone", DEMO, "--ids", ids, "--gen", str(gen),
           "--spec", str(spec), "--out", out_json, "--threads", str(threads)]
    bp.run(cmd)
    with open(out_json) as f:
        return json.load(f)


def acceptance(bins, runs, spec, gen, repeats, threads):
    rows = []
    for name, text in PROMPTS.items():
        ids = encode(bins, text)
        spt = {0: [], spec: []}
        last = {}
        for rep in range(repeats):
            for n in (0, spec):  # alternated, so both see the same load
                r = standalone(bins, ids, gen, n, os.path.join(runs, f"spec-{name}-{n}-{rep}.json"), threads)
                spt[n].append(r["seconds_per_token"])
                last[n] = r
        if last[spec]["generated_ids"] != last[0]["generated_ids"]:
            raise SystemExit(f"bench: --spec {spec} changed the ids of prompt '{name}'")
        drafted, accepted = last[spec]["spec_drafted"], last[spec]["spec_accepted"]
        steps = len(last[spec]["generated_ids"]) - 1  # decode tokens (the first comes from the prompt pass)
        passes = steps - accepted
        rows.append(dict(prompt=name, prompt_tokens=len(ids.split(",")), drafted=drafted, accepted=accepted,
                         rate=accepted / drafted if drafted else 0.0, passes=passes,
                         tokens_per_pass=steps / passes if passes else float("nan"),
                         drafts_per_pass=drafted / passes if passes else 0.0,
                         spt0=statistics.median(spt[0]), sptn=statistics.median(spt[spec]),
                         spt0_all=spt[0], sptn_all=spt[spec]))
        r = rows[-1]
        bp.log(f"bench: {name}: {accepted}/{drafted} drafts accepted, {r['tokens_per_pass']:.2f} tokens/pass, "
               f"s/token {r['spt0']:.4f} -> {r['sptn']:.4f} ({r['spt0'] / r['sptn']:.2f}x)")
    return rows


def pass_cost(bins, build, runs, passes, repeats, drop, spec):
    """prefill_seconds of one T-position pass and the median one-token step, per T, at the
    streaming budget (the floor of the plan with --spec, so the rollback region fits)."""
    ckpt = bp.ensure_checkpoint(build, 4, 64, 32768)
    toml = os.path.join(runs, "spec-bench.toml")
    with open(toml, "w") as f:
        f.write(f'model = "{ckpt}"\nbudget = "auto"\nio = "direct"\ncontext = 4096\nprefill_chunk = 64\n')
    p = subprocess.run([os.path.join(bins, "k3-launch"), toml, "--budget", "1M", "--dry-run", "--spec", str(spec)],
                       capture_output=True, text=True)
    floor = int(p.stderr.split("(")[1].split(" bytes")[0])
    budget = floor // 2**20 + 1
    bp.log(f"bench: streaming budget {budget} MiB (floor with --spec {spec})")
    cost = {T: [] for T in passes}
    steps = {T: [] for T in passes}
    for rep in range(repeats):
        for T in passes:
            ids = ",".join(str(1 + (7 * i) % 1000) for i in range(T))
            out = os.path.join(runs, f"spec-pass-{T}-{rep}.json")
            cold = bp.drop_caches(drop)
            bp.run([os.path.join(bins, "k3-launch"), toml, "--budget", f"{budget}M", "--ids", ids, "--gen", "3",
                    "--out", out])
            with open(out) as f:
                r = json.load(f)
            cost[T].append(r["prefill_seconds"])
            steps[T].extend(r["token_seconds"])  # the decode steps after the pass (arrival gaps)
            bp.log(f"bench: pass of {T} positions {r['prefill_seconds']:.3f} s, steps {r['token_seconds']} "
                   f"(cold {cold}, load {bp.loadavg():.1f})")
    all_steps = [s for T in passes for s in steps[T]]
    return budget, {T: statistics.median(v) for T, v in cost.items()}, statistics.median(all_steps), cost


def interpolate(cost, T):
    """Pass cost at a fractional size T, linear between the measured sizes."""
    xs = sorted(cost)
    if T <= xs[0]:
        return cost[xs[0]]
    for a, b in zip(xs, xs[1:]):
        if T <= b:
            return cost[a] + (cost[b] - cost[a]) * (T - a) / (b - a)
    a, b = xs[-2], xs[-1]
    return cost[b] + (cost[b] - cost[a]) * (T - b) / (b - a)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build_dir")
    ap.add_argument("--bin")
    ap.add_argument("--spec", type=int, default=4)
    ap.add_argument("--gen", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="demo runs (one thread: the least noisy here)")
    ap.add_argument("--passes", default="1,2,3,5,9", help="pass sizes T for (b); must include 1")
    ap.add_argument("--skip-stream", action="store_true", help="only (a)")
    ap.add_argument("--no-drop-caches", action="store_true")
    ap.add_argument("--nice", type=int, default=-20)
    ap.add_argument("--report")
    a = ap.parse_args(argv)
    build = os.path.abspath(a.build_dir)
    bins = os.path.abspath(a.bin or os.path.join(build, "bin"))
    drop = not a.no_drop_caches and os.geteuid() == 0
    if a.nice and (a.nice > 0 or os.geteuid() == 0):
        bp.NICE[:] = ["nice", "-n", str(a.nice)]
    passes = sorted({int(x) for x in a.passes.split(",")})
    if 1 not in passes:
        ap.error("--passes must include 1")
    runs = os.path.join(build, "bench-runs")
    os.makedirs(runs, exist_ok=True)
    load0 = bp.loadavg()

    rows = acceptance(bins, runs, a.spec, a.gen, a.repeats, a.threads)
    lines = [f"# Speculative decoding benchmark ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)",
             "", f"`bench_spec.py --spec {a.spec} --gen {a.gen} --repeats {a.repeats}`; load average at start "
             f"{load0:.1f}.", "",
             "## (a) Acceptance on the demo model (standalone, "
             f"{a.threads} thread{'s' if a.threads != 1 else ''}, median of {a.repeats})", "",
             "| prompt | prompt tokens | drafted | accepted | rate | tokens/pass | s/token spec 0 | "
             f"s/token spec {a.spec} | measured speedup |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['prompt']} | {r['prompt_tokens']} | {r['drafted']} | {r['accepted']} | {r['rate']:.2f} | "
                     f"{r['tokens_per_pass']:.2f} | {r['spt0']:.4f} | {r['sptn']:.4f} | {r['spt0'] / r['sptn']:.2f}x |")
    lines.append("")
    lines.append("Per-repeat s/token: " + "; ".join(
        f"{r['prompt']}: spec 0 {['%.4f' % x for x in r['spt0_all']]}, spec {a.spec} {['%.4f' % x for x in r['sptn_all']]}"
        for r in rows))

    if not a.skip_stream:
        budget, cost, step, raw = pass_cost(bins, build, runs, passes, a.repeats, drop, a.spec)
        lines += ["", f"## (b) Cost of one pass, real-geometry checkpoint, streaming budget {budget} MiB", "",
                  f"Page cache dropped before each run: {drop}. Median one-token decode step over all runs: "
                  f"{step:.3f} s.", "",
                  "| positions T | pass seconds (median) | / 1-position pass | / one-token step | runs |",
                  "|---|---|---|---|---|"]
        for T in passes:
            lines.append(f"| {T} | {cost[T]:.3f} | {cost[T] / cost[1]:.2f} | {cost[T] / step:.2f} | "
                         f"{', '.join('%.3f' % x for x in raw[T])} |")
        lines += ["", "## Prediction: tokens per pass (a) / cost of a pass of the mean size (b)", "",
                  "| prompt | mean pass size | cost / 1-position pass | predicted speedup (streaming) | "
                  "measured on the demo |", "|---|---|---|---|---|"]
        for r in rows:
            size = 1 + r["drafts_per_pass"]
            c = interpolate(cost, size) / cost[1]
            lines.append(f"| {r['prompt']} | {size:.2f} | {c:.2f} | {r['tokens_per_pass'] / c:.2f}x | "
                         f"{r['spt0'] / r['sptn']:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.report:
        with open(a.report, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
