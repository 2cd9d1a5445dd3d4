#!/usr/bin/env python3
"""After training: does the float64 numpy reference agree with the torch model that trained?

    /usr/bin/python3 train/check_reference.py [--model models/k3-demo-tiny] [--windows 4]

Compares, on the WRITTEN checkpoint: the greedy ids of every sample in train/demo_metrics.json
(torch, float32) with tests/reference/k3_ref.py (float64), and the next-token loss of the
first --windows validation windows of 128 tokens (torch float32 vs reference float64).
Prints one line per check and exits 1 if any greedy sequence differs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import train_demo  # noqa: E402
import k3_torch  # noqa: E402

REF = os.path.join(ROOT, "tests", "reference", "k3_ref.py")


def ref_run(model, ids, gen, tmp):
    out = os.path.join(tmp, "r.json")
    trace = os.path.join(tmp, "trace")
    subprocess.run(["/usr/bin/python3", REF, model, "--ids", ",".join(map(str, ids)), "--gen", str(gen),
                    "--out", out, "--dump-trace", trace], check=True, capture_output=True)
    rep = json.load(open(out))
    rep["logits"] = np.fromfile(os.path.join(trace, "logits.f32"), dtype="<f4").reshape(len(ids), -1)
    return rep


def nll(logits, targets):
    lg = torch.as_tensor(np.asarray(logits, dtype=np.float64))
    return F.cross_entropy(lg, torch.as_tensor(targets), reduction="mean").item()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "k3-demo-tiny"))
    ap.add_argument("--windows", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    metrics = json.load(open(os.path.join(HERE, "demo_metrics.json")))
    d = train_demo.dims()
    model = k3_torch.K3(d, train_demo.all_specs(d))
    model.load(train_demo.read_back(args.model, d))
    model.eval()
    va = np.load(os.path.join(ROOT, "build-demo", "ids.npz"))["valid"].astype(np.int64)
    bad = 0
    result = {"greedy": [], "loss": []}
    with tempfile.TemporaryDirectory() as tmp:
        for s in metrics["samples"]:
            rep = ref_run(args.model, s["prompt_ids"], len(s["greedy_ids"]), tmp)
            same = rep["generated_ids"] == s["greedy_ids"]
            bad += not same
            result["greedy"].append({"prompt": s["prompt"], "equal": same, "ref_min_margin": rep["gen_min_margin"]})
            print(f"greedy {'EQUAL' if same else 'DIFFERENT'}: {s['prompt']!r} "
                  f"(reference smallest top-2 margin {rep['gen_min_margin']:.3g})")
        for w in range(args.windows):
            ids = va[w * 128:(w + 1) * 128 + 1]
            rep = ref_run(args.model, ids[:-1].tolist(), 0, tmp)
            with torch.no_grad():
                lt = model(torch.as_tensor(ids[None, :-1]))[0].numpy()
            lr, lt_ = nll(rep["logits"], ids[1:]), nll(lt, ids[1:])
            result["loss"].append({"window": w, "reference": lr, "torch": lt_})
            print(f"window {w}: loss reference {lr:.5f} torch {lt_:.5f} nats/token, "
                  f"max |logit diff| {np.abs(rep['logits'] - lt).max():.2e}")
    with open(os.path.join(HERE, "reference_check.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
