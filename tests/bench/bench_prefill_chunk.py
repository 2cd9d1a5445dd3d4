#!/usr/bin/python3
"""The prompt price before and after the plan chose the prefill chunk (issue 22). Not a test.

    bench_prefill_chunk.py NEW_K3_LAUNCH OLD_K3_LAUNCH [--model tests/data/k3-release]

Dry runs only (they read the config and index, never a shard). For each config (laptop,
desktop, server) at 8G, 32G and 128G, OLD_K3_LAUNCH (a build before issue 22, chunk fixed by the
config) gives its plan: pinned layers, lm_head, expert slots and the config's chunk; its price is
worked out here with the read-price formula of docs/memory-plan.md "Read price" (flat routing:
E·(1 − (1 − k/E)^T) distinct experts per MoE layer per chunk, the cache holding its share), from
the release's trunk sizes. NEW_K3_LAUNCH's `--dry-run --json` gives the planned chunk and its
price. Prints one markdown table row per point.
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def release_sizes(model):
    """Trunk bytes per layer as the plan derives them from config.json alone (the docs' figures)."""
    cfg = json.load(open(os.path.join(model, "config.json")))["text_config"]
    # docs/memory-plan.md "Real release": layer 0 (dense), KDA+MoE and MLA+MoE layers.
    sizes = {"dense": 2341213184, "kda": 1267744256, "mla": 844335616}
    n = cfg["num_hidden_layers"]
    kda = set(cfg["linear_attn_config"]["kda_layers"])  # 1-based
    layers = [sizes["dense"]] + [sizes["kda"] if (l + 1) in kda else sizes["mla"] for l in range(1, n)]
    assert sum(layers) == 108811877376, sum(layers)
    return cfg, layers


def old_price(cfg, layers, pinned, lm_head_resident, slots, chunk):
    E, k = cfg["num_experts"], cfg["num_experts_per_token"]
    moe = cfg["num_hidden_layers"] - cfg["first_k_dense_replace"]
    expert = 17547264 + 4096  # read widened to 4096 bounds (the run is 4096-aligned)
    lm_head = 163840 * 7168 * 2
    trunk = sum(b for i, b in enumerate(layers) if i not in pinned) + (0 if lm_head_resident else lm_head)
    miss = 1 - min(1.0, slots / (moe * E))
    gen = trunk + moe * k * miss * expert
    per_chunk = trunk + moe * E * (1 - (1 - k / E) ** chunk) * miss * expert
    return gen, per_chunk / chunk


def old_plan(exe, toml, model, budget):
    out = subprocess.run([exe, toml, "--model", model, "--dry-run", "--budget", budget],
                         capture_output=True, text=True, check=True).stdout
    pinned_n = int(re.search(r"pinned layers: (\d+) of", out).group(1))
    slots = int(re.search(r"expert slots (\d+)", out).group(1))
    lm = "lm_head resident" in out
    chunk = int(re.search(r"^prefill_chunk = (\d+)", open(toml).read(), re.M).group(1)) if re.search(
        r"^prefill_chunk = (\d+)", open(toml).read(), re.M) else 64
    return out, pinned_n, slots, lm, chunk


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("new")
    ap.add_argument("old")
    ap.add_argument("--model", default=os.path.join(ROOT, "tests", "data", "k3-release"))
    ap.add_argument("--old-configs", default=None, help="directory of the configs before issue 22 (their chunk)")
    a = ap.parse_args()
    cfg, layers = release_sizes(a.model)
    order = sorted(range(len(layers)), key=lambda i: (-layers[i], i))  # pinned largest first (ties: lower index)
    print("| config | budget | before: chunk, pinned, slots | before: per generated / per prompt token | "
          "after: chunk (fits), scratch, pinned, slots | after: per generated / per prompt token | prompt ratio |")
    print("|---|---|---|---|---|---|---|")
    for name in ("laptop", "desktop", "server"):
        new_toml = os.path.join(ROOT, "configs", name + ".toml")
        old_toml = os.path.join(a.old_configs, name + ".toml") if a.old_configs else new_toml
        for budget in ("8G", "32G", "128G"):
            _, pinned_n, slots, lm, chunk = old_plan(a.old, old_toml, a.model, budget)
            pinned = set(order[:pinned_n])  # the plan pins the largest layers first
            g0, p0 = old_price(cfg, layers, pinned, lm, slots, chunk)
            j = json.loads(subprocess.run([a.new, new_toml, "--model", a.model, "--dry-run", "--json", "--budget", budget],
                                          capture_output=True, text=True, check=True).stdout)
            r, c = j["read_bytes"], j["prefill_chunk"]
            print(f"| {name} | {budget} | {chunk}, {pinned_n}, {slots} | {g0 / 1e9:.1f} GB / {p0 / 1e9:.2f} GB | "
                  f"{c['chunk']} ({c['fits']}), {c['scratch_bytes'] / 2**30:.2f} GiB, {len(j['pinned_layers'])}, "
                  f"{j['expert_slots']} | {r['per_generated_token'] / 1e9:.1f} GB / {r['per_prompt_token'] / 1e9:.3f} GB | "
                  f"{p0 / r['per_prompt_token']:.1f}x |")


if __name__ == "__main__":
    sys.exit(main())
