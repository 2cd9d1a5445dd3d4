#!/usr/bin/env python3
"""Independent float64 reference of the K3 forward pass (docs/test-contracts.md).

    k3_ref.py MODEL_DIR --ids 1,2,3 [--gen N] [--out PATH] [--dump-logits PATH]
              [--dump-trace DIR] [--mla-norm-eps E] [--skip-tf]

Greedy decoding by full recompute (ties: lowest id). The report holds prompt_ids,
generated_ids, full_ids and tf_pred, the argmax at every position of one teacher-forced
forward over full_ids (tf_pred[i] predicts full_ids[i+1]; --skip-tf omits it). It also
records the top-1/top-2 logit margin of every greedy choice (gen_margins, gen_min_margin) and
how often the SiTU caps engaged. Memory stays at a few GB even at real K3 geometry (the
model reads weights lazily, see ref_model.py).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_config  # noqa: E402
import ref_model  # noqa: E402
import ref_ops  # noqa: E402
import ref_safetensors  # noqa: E402


def parse_ids(text):
    try:
        ids = [int(t) for t in text.split(",") if t.strip() != ""]
    except ValueError:
        raise SystemExit(f"k3_ref: --ids must be comma-separated integers, got {text!r}")
    if not ids:
        raise SystemExit("k3_ref: --ids is empty")
    return ids


def margin(row):
    top2 = np.sort(row)[-2:]
    return float(top2[1] - top2[0])


def write_trace(directory, trace, cfg):
    os.makedirs(directory, exist_ok=True)
    T = trace["embed"].shape[0]
    meta = {"T": T, "hidden": cfg.hidden, "layers": cfg.layers, "vocab": cfg.vocab, "top_k": cfg.top_k}
    with open(os.path.join(directory, "meta.json"), "w") as f:
        json.dump(meta, f)
    for name, arr in trace.items():
        if name.endswith(".topk"):
            np.ascontiguousarray(arr, dtype="<i4").tofile(os.path.join(directory, name + ".i32"))
        else:
            np.ascontiguousarray(arr, dtype="<f4").tofile(os.path.join(directory, name + ".f32"))


def run(args):
    cfg = ref_config.Config(os.path.join(args.model_dir, "config.json"))
    model = ref_model.Model(ref_safetensors.Checkpoint(args.model_dir), cfg, args.mla_norm_eps, args.expert_inputs)
    prompt = parse_ids(args.ids)
    bad = [i for i in prompt if not 0 <= i < cfg.vocab]
    if bad:
        raise SystemExit(f"k3_ref: token id {bad[0]} outside the vocabulary [0, {cfg.vocab})")

    t0 = time.time()
    trace = {} if args.dump_trace else None
    logits = model.forward(prompt, trace)
    if args.dump_trace:
        write_trace(args.dump_trace, trace, cfg)
    first = logits[-1]
    if args.dump_logits:
        np.ascontiguousarray(first, dtype="<f4").tofile(args.dump_logits)
    ids = list(prompt)
    margins = []
    last = first
    for step in range(args.gen):
        if step > 0:
            last = model.forward(ids)[-1]
        margins.append(margin(last))
        ids.append(int(np.argmax(last)))  # argmax returns the first (lowest) id on ties
    stats = ref_ops.SITU_STATS
    report = {
        "prompt_ids": prompt,
        "generated_ids": ids[len(prompt):],
        "full_ids": ids,
        "gen_margins": margins,
        "gen_min_margin": min(margins) if margins else None,
        "situ_gate_over_cap": stats["gate_over"] / max(stats["n"], 1),
        "situ_up_over_cap": stats["up_over"] / max(stats["n"], 1),
        "mla_norm_eps": args.mla_norm_eps,
        "expert_inputs": args.expert_inputs,
    }
    if not args.skip_tf:
        tf = model.forward(ids)
        report["tf_pred"] = [int(i) for i in np.argmax(tf, axis=-1)]
        report["tf_margins"] = [margin(r) for r in tf]
        report["tf_min_margin"] = min(report["tf_margins"])
    report["seconds"] = time.time() - t0
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    else:
        print(json.dumps(report))
    return report


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--gen", type=int, default=8)
    ap.add_argument("--out")
    ap.add_argument("--dump-logits")
    ap.add_argument("--dump-trace")
    ap.add_argument("--mla-norm-eps", type=float, default=1e-6,
                    help="eps of the MLA q_a/kv_a layernorms (docs/model.md, 'Where sources disagree': 1e-6 official HF, 1e-5 vLLM)")
    ap.add_argument("--expert-inputs", choices=("f32", "bf16"), default="f32",
                    help="bf16: round the routed experts' inputs to bf16 (the engine's --expert-inputs bf16)")
    ap.add_argument("--skip-tf", action="store_true",
                    help="omit the teacher-forced pass (tf_pred): saves one forward at real geometry")
    args = ap.parse_args(argv)
    if args.gen < 0:
        ap.error("--gen must be >= 0")
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
