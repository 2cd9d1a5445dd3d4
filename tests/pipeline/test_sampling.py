"""Sampling, logprobs and perplexity (docs/sampling.md) with real processes on the tiny checkpoint.

- A seeded sampled run gives the same ids from k3-compute --standalone at 1 and 2 threads and
  from k3-launch at a streaming and a pinning budget, with the pread and mmap backends, 1 and
  2 threads, and with routed experts from a k3-expert-server; it differs from the greedy ids,
  and another seed gives other ids.
- --logprobs and --perplexity agree with the independent float64 numpy reference
  (tests/reference/ref_model.py) run on the same ids: each generated token's logprob, its top
  alternatives, and the prompt's nll per token; k3-launch reports the same values as standalone,
  also with --gen 0.
- Out-of-range options are exit 2 with one line, on the command line and in the TOML.
Environment: K3_TESTDATA, K3_BIN (as test_pipeline.py).
"""
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import test_pipeline as tp  # noqa: E402
from proc_util import free_port, main, plan_floor, require, run_launch  # noqa: E402

GEN = 10
# Flat enough on random weights that the draw matters; top-k and top-p both bite.
SAMPLED = ["--temperature", "1.3", "--top-k", "50", "--top-p", "0.97", "--min-p", "0.01",
           "--repeat-penalty", "1.1", "--presence-penalty", "0.2", "--frequency-penalty", "0.1"]
TOL_LOGPROB = 1e-3  # absolute; the engine's logit error is ~3e-5 (docs/testing.md, Tolerances)


def log_softmax64(row):
    row = np.asarray(row, dtype=np.float64)
    m = row.max()
    return row - (m + math.log(np.exp(row - m).sum()))


class SamplingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tp.PipelineTest.setUpClass()  # budgets from the plan (stream / pinned) and a TOML
        cls.base = tp.PipelineTest
        cls.tmp = tempfile.mkdtemp(prefix="k3-sampling-test-")
        cls.sampled = cls.standalone(SAMPLED + ["--seed", "11"], threads=1)["generated_ids"]
        assert len(cls.sampled) == GEN

    @classmethod
    def standalone(cls, extra, threads=1, ids=tp.IDS, gen=GEN, expect_rc=0):
        out = os.path.join(cls.tmp, "standalone.json")
        if os.path.exists(out):
            os.unlink(out)
        r = subprocess.run([os.path.join(tp.BIN, "k3-compute"), "--standalone", tp.MODEL, "--ids", ids,
                            "--gen", str(gen), "--threads", str(threads), "--out", out] + list(extra),
                           capture_output=True, text=True, timeout=tp.TIMEOUT)
        assert r.returncode == expect_rc, r.stderr[-3000:]
        with open(out) as f:
            rep = json.load(f)
        assert [int(x) for x in r.stdout.split()] == rep["generated_ids"]
        return rep

    def launch(self, budget, extra, io="pread", threads=1, gen=GEN, ids=tp.IDS):
        r = run_launch(self.base.toml, "--budget", budget, "--io", io, "--threads", threads, "--ids", ids, "--gen", gen,
                       *extra, out=os.path.join(self.tmp, "launch.json"), timeout=tp.TIMEOUT)
        self.assertEqual(r.leftovers, [], "shared memory or processes left behind")
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIsNotNone(r.report, "no --out report")
        self.assertEqual([int(x) for x in r.stdout.split()], r.report["generated_ids"])
        return r.report, r.stderr

    # -- determinism -------------------------------------------------------------------------

    def test_seed_gives_the_same_ids_everywhere(self):
        seeded = SAMPLED + ["--seed", "11"]
        self.assertEqual(self.standalone(seeded, threads=2)["generated_ids"], self.sampled, "threads 2")
        greedy = self.standalone([], threads=1)["generated_ids"]
        self.assertNotEqual(self.sampled, greedy, "sampling chose the greedy ids")
        other = self.standalone(SAMPLED + ["--seed", "12"], threads=1)["generated_ids"]
        self.assertNotEqual(other, self.sampled, "another seed gave the same ids")
        b = self.base.budgets
        for budget, io, threads in ((b["stream"], "pread", 1), (b["pinned"], "mmap", 2), (b["middle"], "pread", 2)):
            with self.subTest(budget=budget, io=io, threads=threads):
                rep, _ = self.launch(budget, seeded, io=io, threads=threads)
                self.assertEqual(rep["generated_ids"], self.sampled)
                self.assertEqual(rep["sampling"]["seed"], 11)
                self.assertAlmostEqual(rep["sampling"]["temperature"], 1.3, places=6)

    def test_seed_through_an_expert_server(self):
        port = free_port()
        server = subprocess.Popen([os.path.join(tp.BIN, "k3-expert-server"), "--model", tp.MODEL, "--bind",
                                   "tcp://127.0.0.1:%d" % port], stderr=subprocess.PIPE, text=True)
        try:
            self.assertIn("serving on", server.stderr.readline())
            # The server's frames in flight raise the floor; a generous budget holds them.
            # Verified against a manifest written here (k3-model digest), as a user would run it.
            tmp = tempfile.mkdtemp(prefix="k3-sampling-")
            self.addCleanup(shutil.rmtree, tmp, True)
            manifest = os.path.join(tmp, "k3-manifest.json")
            subprocess.run([os.path.join(tp.BIN, "k3-model"), "digest", tp.MODEL,
                            "--out", manifest], check=True, capture_output=True, timeout=120)
            rep, err = self.launch(self.base.budgets["pinned"] * 2, SAMPLED + ["--seed", "11", "--expert-server",
                                                                              "tcp://127.0.0.1:%d" % port,
                                                                              "--manifest", manifest])
            self.assertIn("routed experts come from the expert server", err)
            self.assertEqual(rep["generated_ids"], self.sampled)
        finally:
            server.send_signal(signal.SIGTERM)
            server.communicate(timeout=tp.TIMEOUT)

    def test_temperature_zero_is_greedy_and_seed_is_recorded(self):
        greedy = self.standalone([], threads=1)["generated_ids"]
        self.assertEqual(self.standalone(["--temperature", "0", "--seed", "5"])["generated_ids"], greedy)
        rep, _ = self.launch(self.base.budgets["pinned"], [])
        self.assertEqual(rep["generated_ids"], greedy)
        # No --seed: a random one, recorded so the run can be repeated.
        rep1, _ = self.launch(self.base.budgets["pinned"], SAMPLED)
        again, _ = self.launch(self.base.budgets["pinned"], SAMPLED + ["--seed", str(rep1["sampling"]["seed"])])
        self.assertEqual(again["generated_ids"], rep1["generated_ids"])

    # -- logprobs and perplexity against the reference ----------------------------------------

    def test_logprobs_and_perplexity_match_the_reference(self):
        import ref_config
        import ref_model
        import ref_safetensors
        top_n = 5
        rep = self.standalone(SAMPLED + ["--seed", "3", "--logprobs", str(top_n), "--perplexity"], threads=1)
        prompt = [int(x) for x in tp.IDS.split(",")]
        gen = rep["generated_ids"]
        cfg = ref_config.Config(os.path.join(tp.MODEL, "config.json"))
        model = ref_model.Model(ref_safetensors.Checkpoint(tp.MODEL), cfg)
        rows = np.asarray(model.forward(prompt + gen), dtype=np.float64)
        self.assertEqual(len(rep["logprobs"]), len(gen))
        for i, entry in enumerate(rep["logprobs"]):
            ref = log_softmax64(rows[len(prompt) - 1 + i])  # the row that chose generated token i
            self.assertEqual(entry["id"], gen[i])
            self.assertLess(abs(entry["logprob"] - ref[gen[i]]), TOL_LOGPROB, "token %d" % i)
            self.assertEqual(len(entry["top"]), top_n)
            ref_top = sorted(range(len(ref)), key=lambda j: (-ref[j], j))[:top_n]
            for k, alt in enumerate(entry["top"]):
                self.assertLess(abs(alt["logprob"] - ref[ref_top[k]]), TOL_LOGPROB)
                if k + 1 < top_n and ref[ref_top[k]] - ref[ref_top[k + 1]] > TOL_LOGPROB:
                    self.assertEqual(alt["id"], ref_top[k])
            self.assertEqual(entry["top"], sorted(entry["top"], key=lambda a: (-a["logprob"], a["id"])))
        # Sampling happened (some token is not the most likely one), yet logprobs are of the raw logits.
        self.assertTrue(any(e["id"] != e["top"][0]["id"] for e in rep["logprobs"]))
        nll = -sum(log_softmax64(rows[t])[prompt[t + 1]] for t in range(len(prompt) - 1))
        self.assertEqual(rep["scored_tokens"], len(prompt) - 1)
        self.assertLess(abs(rep["nll_per_token"] - nll / (len(prompt) - 1)), TOL_LOGPROB)
        self.assertAlmostEqual(rep["perplexity"], math.exp(rep["nll_per_token"]), places=9)
        # Chunked prefill (2 ids per chunk) scores the same.
        chunked = self.standalone(["--perplexity", "--prefill-chunk", "2"], gen=0)
        self.assertLess(abs(chunked["nll_per_token"] - rep["nll_per_token"]), 1e-5)

        # k3-launch: the same values through the pipeline (float32 on the wire), --gen 0 too. The
        # streaming floor with --perplexity, whose kept prompt logits the plan counts in scratch.
        stream = max(self.base.budgets["stream"], plan_floor(self.base.toml, "--perplexity"))
        lrep, err = self.launch(stream, SAMPLED + ["--seed", "3", "--logprobs", str(top_n), "--perplexity"])
        self.assertEqual(lrep["generated_ids"], gen)
        for a, b in zip(lrep["logprobs"], rep["logprobs"]):
            self.assertEqual(a["id"], b["id"])
            self.assertAlmostEqual(a["logprob"], b["logprob"], delta=1e-5)
            self.assertEqual([t["id"] for t in a["top"]], [t["id"] for t in b["top"]])
        self.assertAlmostEqual(lrep["nll_per_token"], rep["nll_per_token"], delta=1e-9)
        self.assertIn("prompt perplexity", err)
        only, _ = self.launch(self.base.budgets["pinned"], ["--perplexity"], gen=0)
        self.assertEqual(only["generated_ids"], [])
        self.assertEqual(only["scored_tokens"], len(prompt) - 1)
        self.assertAlmostEqual(only["nll_per_token"], rep["nll_per_token"], delta=1e-9)
        self.assertNotIn("logprobs", only)

    # -- bad input ----------------------------------------------------------------------------

    def test_out_of_range_options_exit_2_with_one_line(self):
        cases = [["--top-p", "1.5"], ["--top-p", "0"], ["--temperature", "-1"], ["--min-p", "2"],
                 ["--repeat-penalty", "0"], ["--repeat-last-n", "-2"], ["--presence-penalty", "3"],
                 ["--frequency-penalty", "-2.5"], ["--top-k", "-1"], ["--logprobs", "101"], ["--seed", "-1"],
                 ["--seed", "18446744073709551616"]]
        for extra in cases:
            for binary, args in (("k3-launch", [self.base.toml, "--ids", "1"]),
                                 ("k3-compute", ["--standalone", tp.MODEL, "--ids", "1"])):
                with self.subTest(binary=binary, extra=extra):
                    r = subprocess.run([os.path.join(tp.BIN, binary)] + args + extra, capture_output=True,
                                       text=True, timeout=60)
                    self.assertEqual(r.returncode, 2, r.stderr)
                    self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                    if extra[0] != "--seed":
                        self.assertIn(extra[0], r.stderr)
        for line in ('top_p = 1.5', 'temperature = "hot"', 'seed = -3', 'perplexity = 1', 'top_k = 1.5'):
            with self.subTest(toml=line):
                path = os.path.join(self.tmp, "bad.toml")
                with open(path, "w") as f:
                    f.write('model = "%s"\nbudget = "1G"\n%s\n' % (tp.MODEL, line))
                r = subprocess.run([os.path.join(tp.BIN, "k3-launch"), path, "--ids", "1", "--dry-run"],
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)


if __name__ == "__main__":
    require(tp.BIN and os.path.isdir(tp.MODEL), "K3_BIN / K3_TESTDATA not set")
    main()
