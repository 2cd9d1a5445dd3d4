#!/usr/bin/env python3
"""The installed tree runs the demo (docs/testing.md "Install").

    K3_BUILD_DIR=build /usr/bin/python3 tests/demo/test_install.py [-v]

`cmake --install BUILD --prefix TMP`, then TMP/bin/k3-launch TMP/share/k3/configs/demo.toml
--prompt Hi from a working directory outside both trees: the run succeeds and its greedy ids
equal those of the same run from the build tree (same model, same engine).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "pipeline"))
from proc_util import main, run_launch  # noqa: E402
BUILD = os.path.abspath(os.environ.get("K3_BUILD_DIR", os.path.join(ROOT, "build")))
BIN = os.environ.get("K3_BIN_DIR", os.path.join(BUILD, "bin"))
CMAKE = os.environ.get("K3_CMAKE") or shutil.which("cmake") or "cmake"
GEN = "4"
BINARIES = ["k3-launch", "k3-trunk-reader", "k3-expert-fetcher", "k3-compute", "k3-tokenizer",
            "k3-expert-server", "k3-server", "k3-model"]


def launch(exe, config, cwd, out):
    r = run_launch(config, "--prompt", "Hi", "--gen", GEN, out=out, exe=exe, cwd=cwd, timeout=120,
                   stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise AssertionError(f"{exe} exited {r.returncode}: {r.stderr.strip()[-600:]}")
    return r.report


class Install(unittest.TestCase):
    def test_installed_tree_runs_the_demo(self):
        with tempfile.TemporaryDirectory(prefix="k3-install-") as tmp:
            prefix = os.path.join(tmp, "prefix")
            p = subprocess.run([CMAKE, "--install", BUILD, "--prefix", prefix],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout[-400:] + p.stderr[-400:])
            versions = set()
            for b in BINARIES:
                exe = os.path.join(prefix, "bin", b)
                self.assertTrue(os.access(exe, os.X_OK), b)
                # Every installed binary answers --version with its name and the one version.
                v = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
                self.assertEqual(v.returncode, 0, b + ": " + v.stderr)
                name, _, version = v.stdout.strip().partition(" ")
                self.assertEqual(name, b)
                self.assertRegex(version, r"^\d+\.\d+\.\d+$")
                versions.add(version)
            self.assertEqual(len(versions), 1, versions)
            # Tests and benchmarks stay in the build tree.
            self.assertEqual(sorted(os.listdir(os.path.join(prefix, "bin"))), sorted(BINARIES))
            share = os.path.join(prefix, "share", "k3")
            config = os.path.join(share, "configs", "demo.toml")
            self.assertTrue(os.path.isfile(config))
            model = os.path.join(share, "models", "k3-demo-tiny")
            for f in ("config.json", "model.safetensors.index.json", "tiktoken.model",
                      "tokenizer_config.json"):
                self.assertTrue(os.path.isfile(os.path.join(model, f)), f)

            elsewhere = os.path.join(tmp, "cwd")
            os.mkdir(elsewhere)
            got = launch(os.path.join(prefix, "bin", "k3-launch"), config, elsewhere,
                         os.path.join(tmp, "installed.json"))
            want = launch(os.path.join(BIN, "k3-launch"), os.path.join(ROOT, "configs", "demo.toml"),
                          elsewhere, os.path.join(tmp, "build.json"))
            self.assertEqual(len(got["generated_ids"]), int(GEN))
            self.assertEqual(got["generated_ids"], want["generated_ids"])
            self.assertEqual(got["prompt_ids"], want["prompt_ids"])


if __name__ == "__main__":
    main()
