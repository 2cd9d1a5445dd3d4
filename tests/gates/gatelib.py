"""Shared helpers of the model gates: locating the engine, running both sides, comparing."""
import hashlib
import json
import os
import shlex
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REF_DIR = os.path.join(HERE, "..", "reference")
REF = os.path.join(REF_DIR, "k3_ref.py")
sys.path.insert(0, REF_DIR)
import ref_config  # noqa: E402
import ref_model  # noqa: E402
import ref_ops  # noqa: E402
import ref_safetensors  # noqa: E402
SKIP = 77  # ctest SKIP_RETURN_CODE

# Relative max error max|e - r| / max|r| of a float32 engine against the float64 reference.
# Chosen with margin over measured values; see docs/testing.md ("Tolerances").
TOL_LOGITS = 1e-4
TOL_TRACE = 1e-4
# With --expert-inputs bf16 on both sides. Rounding is a step function: an input that the f32
# engine and the f64 reference compute 1e-7 apart but that lies on either side of a bf16
# rounding boundary differs by a whole bf16 step (2^-9 relative) after rounding. On the tiny
# models (64-wide expert latent) one such step moves the logits by ~1e-3 (measured: 2.3e-3 and
# 7.9e-4, one step each, against 2.0e-2 and 5.8e-3 between bf16 and f32 inputs); at real
# geometry 1.1e-3 against 3.2e-3 (docs/testing.md).
TOL_LOGITS_BF16_INPUTS = 1e-2

PROMPT = [5, 17, 300, 42, 7, 99, 128, 256, 1, 2, 3, 400]  # 12 ids, all < 512 (tiny vocab)
N_GEN = 24
N_TF_GEN = 20  # prompt 12 + 20 generated = the 32-id teacher-forcing sequence


def testdata():
    d = os.environ.get("K3_TESTDATA")
    if not d or not os.path.isdir(d):
        print(f"K3_TESTDATA is not set or missing ({d!r}); run the gate fixture first", file=sys.stderr)
        sys.exit(1)
    return d


def engine_or_skip():
    """K3_COMPUTE is the engine command (a path, or e.g. "python3 ref_engine.py --perturb-logits 1e-3")."""
    exe = os.environ.get("K3_COMPUTE", "")
    argv = shlex.split(exe)
    if not argv or not os.path.exists(argv[0]):
        print(f"SKIP: k3-compute not built (K3_COMPUTE={exe!r}); the gate is ready and waits for it")
        sys.exit(SKIP)
    return argv


def model_dir():
    return os.path.join(testdata(), os.environ.get("K3_GATE_MODEL", "tiny"))


def work_dir(name):
    # One folder per (engine command, model, gate) so parallel ctest runs never share files.
    tag = hashlib.sha1(os.environ.get("K3_COMPUTE", "").encode()).hexdigest()[:8]
    d = os.path.join(testdata(), "gate-work", tag, os.environ.get("K3_GATE_MODEL", "tiny"), name)
    os.makedirs(d, exist_ok=True)
    return d


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r


def ids_arg(ids):
    return ",".join(str(i) for i in ids)


def run_engine(exe, out_dir, tag, ids, gen, *extra):
    """Run k3-compute standalone; returns (report dict, path prefix of the outputs)."""
    base = os.path.join(out_dir, tag)
    # --ignore-eos: the reference knows no end ids, so the engine runs exactly --gen tokens too.
    cmd = list(exe) + ["--standalone", model_dir(), "--ids", ids_arg(ids), "--gen", str(gen),
                         "--ignore-eos", "--out", base + ".json", *extra]
    run(cmd)
    with open(base + ".json") as f:
        return json.load(f), base


def run_reference(out_dir, tag, ids, gen, *extra):
    base = os.path.join(out_dir, tag)
    run([sys.executable, REF, model_dir(), "--ids", ids_arg(ids), "--gen", str(gen), "--out", base + ".json", *extra])
    with open(base + ".json") as f:
        return json.load(f), base


def reference_model():
    """The float64 reference model of model_dir() in this process (for gates that need its
    activations, not just its CLI): (ref_model.Model, ref_config.Config)."""
    d = model_dir()
    cfg = ref_config.Config(os.path.join(d, "config.json"))
    return ref_model.Model(ref_safetensors.Checkpoint(d), cfg), cfg


def read_f32(path):
    return np.fromfile(path, dtype="<f4").astype(np.float64)


def rel_err(e, r):
    e, r = np.asarray(e, dtype=np.float64), np.asarray(r, dtype=np.float64)
    if e.shape != r.shape:
        raise AssertionError(f"shape mismatch: engine {e.shape} vs reference {r.shape}")
    if not np.all(np.isfinite(e)):
        return float("inf")
    scale = np.max(np.abs(r))
    return float(np.max(np.abs(e - r)) / scale) if scale > 0 else float(np.max(np.abs(e)))


def file_bytes(path):
    with open(path, "rb") as f:
        return f.read()
