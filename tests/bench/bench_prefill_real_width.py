#!/usr/bin/python3
"""A long prompt at a streaming budget on a checkpoint with real-width experts (issue 22). Not a test.

    bench_prefill_real_width.py MODEL [--bin build/bin] [--budget 6G] [--prompt-tokens 1000]
                                [--chunks 0,64] [--gen 1] [--out FILE.json]

MODEL: a checkpoint whose MoE layers hold all 896 experts at real size, e.g.
    tests/generator/make_checkpoint.py DIR --preset real --layers 2 --experts 896   (23.2 GB)
For each prefill cap in --chunks (0: the chunk the memory plan chooses) the same seeded random
prompt runs through `k3-launch --ids ... --ignore-eos`, the page cache dropped before each run;
the raw O_DIRECT rate of the MoE shard (k3-disk-bench, 4 MiB x 8) is measured in the same
invocation, before the first run and after the last. Prints one markdown row per run: the
planned chunk, bytes read (trunk, experts) per prompt token, seconds per prompt token, first-token
time and the generated ids (identical across chunks, or the script exits 1).
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def raw_rate(bins, shard):
    drop_caches()
    p = subprocess.run([os.path.join(bins, "k3-disk-bench"), shard, "--backend", "direct", "--depth", "8",
                        "--chunk", str(4 << 20), "--bytes", str(4 << 30)], capture_output=True, text=True, check=True)
    return float(re.search(r"([\d.]+) MB/s", p.stdout).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--budget", default="6G")
    ap.add_argument("--prompt-tokens", type=int, default=1000)
    ap.add_argument("--chunks", default="0,64", help="prefill caps, comma separated (0: the plan's chunk)")
    ap.add_argument("--gen", type=int, default=1, help="1: the first token comes from the prefill, so every byte read is the prompt's")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="all reports and rates as JSON")
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.model, "config.json")))["text_config"]
    index = json.load(open(os.path.join(a.model, "model.safetensors.index.json")))["weight_map"]
    moe_shard = max(set(index.values()), key=lambda s: os.path.getsize(os.path.join(a.model, s)))
    shard = os.path.join(a.model, moe_shard)
    r = random.Random(a.seed)
    ids = ",".join(str(r.randrange(cfg["vocab_size"])) for _ in range(a.prompt_tokens))
    launch = os.path.join(a.bin, "k3-launch")
    rates = [raw_rate(a.bin, shard)]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        toml = os.path.join(tmp, "bench.toml")
        with open(toml, "w") as f:
            f.write(f'model = "{a.model}"\nbudget = "{a.budget}"\ncontext = {max(2048, a.prompt_tokens + a.gen)}\n')
        for cap in [int(c) for c in a.chunks.split(",")]:
            out = os.path.join(tmp, f"r{cap}.json")
            cmd = [launch, toml, "--ids", ids, "--gen", str(a.gen), "--ignore-eos", "--threads", str(a.threads),
                   "--prefill-chunk", str(cap), "--out", out]
            dry = json.loads(subprocess.run(cmd[:2] + ["--prefill-chunk", str(cap), "--dry-run", "--json"],
                                            capture_output=True, text=True, check=True).stdout)
            drop_caches()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            rep = json.load(open(out))
            runs.append({"cap": cap, "chunk": dry["prefill_chunk"]["chunk"], "report": rep,
                         "dry_per_prompt_token": dry["read_bytes"]["per_prompt_token"]})
            print(f"bench: cap {cap}: chunk {dry['prefill_chunk']['chunk']}, prefill {rep['prefill_seconds']:.1f} s",
                  file=sys.stderr, flush=True)
    rates.append(raw_rate(a.bin, shard))
    n = a.prompt_tokens
    print(f"raw O_DIRECT rate of {moe_shard} (4 MiB x 8): {rates[0]:.0f} MB/s before, {rates[1]:.0f} MB/s after")
    print("Pinned once at start (globals), not counted per token: " +
          ", ".join(f"{x['report']['service_stats']['trunk-reader']['pin_bytes_done'] / 1e9:.2f} GB" for x in runs))
    print("| prefill cap | chunk | trunk read / prompt token | experts read / prompt token | total / prompt token "
          "| planned / prompt token | prefill s | s / prompt token | first token s | generated ids |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for x in runs:
        rep = x["report"]
        st = rep["service_stats"]
        pin = st["trunk-reader"]["pin_bytes_done"]  # once per process, before the prompt
        trunk = rep["trunk_bytes_read"] - pin
        experts = rep["expert_bytes_read"]
        print(f"| {x['cap'] or 'none (plan)'} | {x['chunk']} | {trunk / n / 1e6:.1f} MB | {experts / n / 1e6:.1f} MB | "
              f"{(trunk + experts) / n / 1e6:.1f} MB | {x['dry_per_prompt_token'] / 1e6:.1f} MB | "
              f"{rep['prefill_seconds']:.1f} | {rep['prefill_seconds'] / n:.3f} | {rep['first_token_seconds']:.1f} | "
              f"{' '.join(map(str, rep['generated_ids']))} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"rates_mb_s": rates, "runs": runs}, f, indent=1)
    same = all(x["report"]["generated_ids"] == runs[0]["report"]["generated_ids"] for x in runs)
    print("ids identical across chunks" if same else "IDS DIFFER across chunks")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
