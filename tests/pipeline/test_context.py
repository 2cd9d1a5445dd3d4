"""The planned context bounds prompt + generated tokens (issue 13 item 2), with the real
k3-launch and services on the demo model (models/k3-demo-tiny) and k3-compute --standalone:

- `--context 16 --ids 1,2,3 --gen 100` generates 13 tokens, finish_reason "length", the same
  13 ids as an unbounded run; a text prompt the same (context = prompt + 5 gives 5 tokens).
- An id prompt longer than the context is exit 2 naming both numbers, before any service
  starts (no child process was ever started: no service line on stderr).
- A text prompt longer than the context is exit 2 naming both numbers, after the tokenizer
  encoded it but before the weight services started: stderr shows the tokenizer ready and
  nothing from the trunk reader, the expert fetcher or compute (no pinning, no weight read).
- k3-compute --standalone: --context bounds the run the same way; a prompt longer than it is
  exit 2 before the weights are mapped ("loading" never printed).
Every launcher run checks that no /dev/shm/k3-* name and no child process is left behind.
Environment: K3_BIN (directory with the binaries).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import last_line, main, require, run_launch  # noqa: E402

BIN = os.environ.get("K3_BIN", "")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "configs", "demo.toml")
DEMO_MODEL = os.path.join(ROOT, "models", "k3-demo-tiny")
TIMEOUT = 300
WEIGHT_SERVICES = ("trunk-reader", "expert-fetcher", "compute")


class Context(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-context-")
        cls.n = 0

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def launch(self, *args):
        """Runs k3-launch on the demo TOML; returns (rc, stdout, stderr, report, seconds)."""
        Context.n += 1
        r = run_launch(DEMO, *args, out=os.path.join(self.tmp, "r%d.json" % Context.n), timeout=TIMEOUT)
        self.assertEqual(r.leftovers, [], "shared memory or processes left behind")
        return r.returncode, r.stdout, r.stderr, r.report, r.seconds

    def test_generation_stops_at_the_context(self):
        rc, out, err, rep, _ = self.launch("--context", "16", "--ids", "1,2,3", "--gen", "100", "--ignore-eos")
        self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(len(rep["generated_ids"]), 13)
        self.assertEqual(len(out.split()), 13)
        self.assertEqual(rep["finish_reason"], "length")
        self.assertIn("13 tokens (ended: length)", err)
        rc, out, err, full, _ = self.launch("--ids", "1,2,3", "--gen", "20", "--ignore-eos")
        self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(rep["generated_ids"], full["generated_ids"][:13])
        # A prompt that fills the context exactly: the prompt pass, no token.
        rc, out, err, rep, _ = self.launch("--context", "3", "--ids", "1,2,3", "--gen", "5", "--ignore-eos")
        self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(rep["generated_ids"], [])
        self.assertEqual(rep["finish_reason"], "length")

    def test_text_prompt_generation_stops_at_the_context(self):
        prompt = "The meaning of life is"
        rc, out, err, rep, _ = self.launch("--prompt", prompt, "--gen", "1", "--ignore-eos")
        self.assertEqual(rc, 0, err[-2000:])
        n = len(rep["prompt_ids"])
        rc, out, err, rep, _ = self.launch("--prompt", prompt, "--context", str(n + 5), "--gen", "100",
                                           "--ignore-eos")
        self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(len(rep["generated_ids"]), 5)
        self.assertEqual(rep["finish_reason"], "length")

    def test_id_prompt_longer_than_the_context_is_refused_before_any_service(self):
        rc, out, err, rep, took = self.launch("--context", "4", "--ids", "1,2,3,4,5", "--gen", "3")
        self.assertEqual(rc, 2, err)
        self.assertEqual(last_line(err),
                         "k3-launch: the prompt has 5 tokens but the context is 4 (--context): it does not fit")
        self.assertNotIn("[launch]", err)  # nothing started
        self.assertIsNone(rep)

    def test_text_prompt_longer_than_the_context_is_refused_before_the_weight_services(self):
        prompt = "one two three four five six seven eight nine ten " * 20
        enc = subprocess.run([os.path.join(BIN, "k3-tokenizer"), "encode", "--vocab", DEMO_MODEL],
                             input=prompt.encode(), capture_output=True, timeout=60)
        self.assertEqual(enc.returncode, 0, enc.stderr)
        n = len([x for x in enc.stdout.decode().replace(",", " ").split() if x])
        self.assertGreater(n, 64)
        rc, out, err, rep, took = self.launch("--context", "64", "--prompt", prompt, "--gen", "3")
        self.assertEqual(rc, 2, err)
        self.assertEqual(last_line(err), "k3-launch: the prompt has %d tokens but the context is 64 (--context): "
                                         "it does not fit" % n)
        self.assertIn("[launch] tokenizer ready", err)
        for svc in WEIGHT_SERVICES:
            self.assertNotIn("[%s]" % svc, err)  # never started: nothing pinned, nothing read
            self.assertNotIn("%s ready" % svc, err)
        self.assertNotIn("pinning trunk", err)
        self.assertEqual(out, "")

    def test_standalone_context(self):
        compute = os.path.join(BIN, "k3-compute")
        out_json = os.path.join(self.tmp, "sa.json")
        r = subprocess.run([compute, "--standalone", DEMO_MODEL, "--ids", "1,2,3", "--gen", "100", "--context", "16",
                            "--ignore-eos", "--threads", "1", "--out", out_json], capture_output=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        with open(out_json) as f:
            rep = json.load(f)
        self.assertEqual(len(rep["generated_ids"]), 13)
        self.assertEqual(rep["finish_reason"], "length")
        r = subprocess.run([compute, "--standalone", DEMO_MODEL, "--ids", "1,2,3,4,5", "--gen", "3", "--context", "4"],
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(last_line(r.stderr),
                         "k3-compute: the prompt has 5 tokens but the context is 4 (--context): it does not fit")
        self.assertNotIn("loading", r.stderr)  # refused before the weights were mapped


if __name__ == "__main__":
    require(BIN and os.path.isdir(DEMO_MODEL), "K3_BIN not set or the demo model is missing")
    main()
