#!/usr/bin/env python3
"""Stand-in for `k3-compute --standalone` that runs the Python reference, used only to prove the
gates themselves: with no perturbation every gate must pass; with --perturb-logits or the
disputed --mla-norm-eps 1e-5 the accuracy gates must FAIL (registered as WILL_FAIL in ctest).
Outputs are float32 like the engine's."""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import k3_ref  # noqa: E402
import ref_config  # noqa: E402
import ref_model  # noqa: E402
import ref_safetensors  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--standalone", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--gen", type=int, default=8)
    ap.add_argument("--full-recompute", action="store_true")
    ap.add_argument("--prefill-chunk", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dump-logits")
    ap.add_argument("--dump-trace")
    ap.add_argument("--tf-check", action="store_true")
    ap.add_argument("--ignore-eos", action="store_true", help="accepted: the reference always runs --gen tokens")
    ap.add_argument("--out", required=True)
    ap.add_argument("--perturb-logits", type=float, default=0.0, help="relative noise added to every logit")
    ap.add_argument("--mla-norm-eps", type=float, default=1e-6)
    a = ap.parse_args()
    cfg = ref_config.Config(os.path.join(a.standalone, "config.json"))
    model = ref_model.Model(ref_safetensors.Checkpoint(a.standalone), cfg, a.mla_norm_eps)
    rng = np.random.default_rng(0)

    def forward(ids, trace=None):
        lg = model.forward(ids, trace)
        if a.perturb_logits:
            lg = lg + a.perturb_logits * np.abs(lg).max() * rng.standard_normal(lg.shape)
        return lg.astype(np.float32)

    ids = k3_ref.parse_ids(a.ids)
    report = {"prompt_ids": list(ids), "threads": a.threads, "isa": "python-reference",
              "seconds_per_token": 0.0, "prefill_seconds": 0.0}
    if a.tf_check:
        report["tf_pred"] = [int(i) for i in np.argmax(forward(ids), axis=-1)]
    trace = {} if a.dump_trace else None
    last = forward(ids, trace)[-1]
    if a.dump_trace:
        if a.perturb_logits:
            trace["logits"] = trace["logits"] * (1 + a.perturb_logits)
        k3_ref.write_trace(a.dump_trace, trace, cfg)
    if a.dump_logits:
        last.astype("<f4").tofile(a.dump_logits)
    full = list(ids)
    for step in range(a.gen):
        if step > 0:
            last = forward(full)[-1]
        full.append(int(np.argmax(last)))
    report.update(generated_ids=full[len(ids):], full_ids=full)
    with open(a.out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
