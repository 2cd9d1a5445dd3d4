"""Speculative decoding (--spec N) with real processes.

- The generated tiny checkpoint through k3-launch at two budgets (everything streams; every
  layer pinned): --spec 4 gives the ids of --spec 0, and the logits choosing the first token,
  byte for byte; the report counts spec_drafted / spec_accepted.
- The demo model (trained) with a repetitive prompt: drafts are accepted (spec_accepted > 0)
  and the ids are those of --spec 0; on the random tiny model most drafts are rejected, with
  the same ids.
- A stop id that the drafts run into: generation ends right after it, as without --spec.
- k3-compute --standalone --spec: the same ids as without, and its report's counts.
- --dry-run prints a spec-rollback region only with --spec > 0; bad values are exit 2.
Every launcher run checks that no /dev/shm/k3-* name and no child process is left behind.
Environment: K3_TESTDATA (fixture dir), K3_BIN (directory with the binaries).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import main, plan_floor, require, run_launch  # noqa: E402

BIN = os.environ.get("K3_BIN", "")
TESTDATA = os.environ.get("K3_TESTDATA", "")
TINY = os.path.join(TESTDATA, "tiny")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "configs", "demo.toml")
DEMO_MODEL = os.path.join(ROOT, "models", "k3-demo-tiny")
# A prompt that repeats itself; with 30 tokens the random model's own ids recur too (drafts,
# which it rejects).
TINY_IDS = ",".join(["1,5,9,200,77,3,18,42"] * 3)
DEMO_PROMPT = ("The cat sat on the mat. The dog sat on the log. " * 4) + "The cat"
TIMEOUT = 300


class Speculative(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-spec-test-")
        cls.toml = os.path.join(cls.tmp, "tiny.toml")
        with open(cls.toml, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\nio = "pread"\ngen = 30\nthreads = 1\n' % TINY)
        cls.floor = cls.plan_floor(cls.toml)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def plan_floor(cls, toml, *extra):
        return plan_floor(toml, *extra, timeout=TIMEOUT)

    def launch(self, toml, name, *args):
        """Runs k3-launch with --out; returns (report, stderr)."""
        r = run_launch(toml, *args, out=os.path.join(self.tmp, name + ".json"), timeout=TIMEOUT)
        self.assertEqual(r.leftovers, [], "shared memory or processes left behind")
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIsNotNone(r.report, "no --out report")
        return r.report, r.stderr

    def dry_toml(self, name, keys):
        """k3-launch --dry-run of a TOML with the tiny model and `keys` (TOML lines)."""
        toml = os.path.join(self.tmp, name + ".toml")
        with open(toml, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\n%s\n' % (TINY, keys))
        return subprocess.run([os.path.join(BIN, "k3-launch"), toml, "--dry-run"], capture_output=True, text=True,
                              timeout=TIMEOUT)

    def pinned_budget(self):
        """The smallest power-of-two multiple of the floor that pins every layer."""
        b = self.plan_floor(self.toml, "--spec", "4")
        while True:
            r = subprocess.run([os.path.join(BIN, "k3-launch"), self.toml, "--budget", str(b), "--dry-run",
                                "--spec", "4"], capture_output=True, text=True, timeout=TIMEOUT)
            self.assertEqual(r.returncode, 0, r.stderr)
            line = [l for l in r.stdout.splitlines() if l.startswith("pinned layers:")][0]
            n, of = line.split(":")[1].split(";")[0].split(" of ")
            if int(n) == int(of):
                return b
            b *= 2

    def test_same_ids_and_first_logits_at_two_budgets(self):
        spec_floor = self.plan_floor(self.toml, "--spec", "4")
        self.assertGreater(spec_floor, self.floor)  # the rollback region is planned
        for budget in (spec_floor, self.pinned_budget()):
            with self.subTest(budget=budget):
                runs = {}
                for n in (0, 4):
                    logits = os.path.join(self.tmp, "logits-%d-%d.f32" % (budget, n))
                    runs[n], err = self.launch(self.toml, "tiny-%d-%d" % (budget, n), "--budget", str(budget),
                                               "--ids", TINY_IDS, "--spec", str(n), "--dump-logits", logits)
                    with open(logits, "rb") as f:
                        runs[n]["logits"] = f.read()
                self.assertEqual(len(runs[0]["generated_ids"]), 30)
                self.assertEqual(runs[4]["generated_ids"], runs[0]["generated_ids"])
                self.assertEqual(runs[4]["logits"], runs[0]["logits"])
                self.assertEqual(runs[0]["spec_drafted"], 0)
                self.assertGreater(runs[4]["spec_drafted"], 0)
                self.assertIn("[launch] speculation: %d drafts verified" % runs[4]["spec_drafted"], err)
                # The random model rarely agrees with its prompt's repeats: drafts are rejected.
                self.assertLess(runs[4]["spec_accepted"], runs[4]["spec_drafted"])
                self.assertEqual(runs[4]["finish_reason"], "length")

    def test_standalone_spec_same_ids(self):
        outs = {}
        for n in (0, 3):
            rep = os.path.join(self.tmp, "standalone-%d.json" % n)
            r = subprocess.run([os.path.join(BIN, "k3-compute"), "--standalone", TINY, "--ids", TINY_IDS,
                                "--gen", "30", "--threads", "1", "--spec", str(n), "--out", rep],
                               capture_output=True, text=True, timeout=TIMEOUT)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(rep) as f:
                outs[n] = json.load(f)
            self.assertEqual([int(x) for x in r.stdout.split()], outs[n]["generated_ids"])
        self.assertEqual(outs[3]["generated_ids"], outs[0]["generated_ids"])
        self.assertEqual(outs[0]["spec_drafted"], 0)
        self.assertGreater(outs[3]["spec_drafted"], 0)

    def test_bad_spec_values_are_usage_errors(self):
        for args in (["--spec", "-1"], ["--spec", "17"], ["--spec", "x"]):
            with self.subTest(args=args):
                r = subprocess.run([os.path.join(BIN, "k3-launch"), self.toml, "--dry-run"] + args,
                                   capture_output=True, text=True, timeout=TIMEOUT)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
                self.assertIn("--spec", r.stderr)
                r = subprocess.run([os.path.join(BIN, "k3-compute"), "--standalone", TINY, "--ids", "1"] + args,
                                   capture_output=True, text=True, timeout=TIMEOUT)
                self.assertEqual(r.returncode, 2, r.stderr)
        r = self.dry_toml("recompute", "full_recompute = true\nspec = 2")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--spec", r.stderr)
        r = subprocess.run([os.path.join(BIN, "k3-compute"), "--standalone", TINY, "--ids", "1", "--spec", "2",
                            "--full-recompute"], capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 2, r.stderr)

    def test_dry_run_region_only_with_spec(self):
        def plan(*extra):
            r = subprocess.run([os.path.join(BIN, "k3-launch"), self.toml, "--dry-run"] + list(extra),
                               capture_output=True, text=True, timeout=TIMEOUT)
            self.assertEqual(r.returncode, 0, r.stderr)
            return r.stdout
        self.assertNotIn("spec-rollback", plan())
        self.assertNotIn("spec-rollback", plan("--spec", "0"))
        self.assertIn("spec-rollback", plan("--spec", "4"))
        r = self.dry_toml("spec", "spec = 3")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("spec-rollback", r.stdout)


@unittest.skipUnless(os.path.isdir(DEMO_MODEL), "the demo model is missing")
class SpeculativeDemo(unittest.TestCase):
    """The trained demo model: repetitive text, so drafts are accepted."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-spec-demo-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    launch = Speculative.launch

    def test_repetitive_prompt_accepts_drafts_with_the_same_ids(self):
        runs = {}
        for n in (0, 4):
            logits = os.path.join(self.tmp, "demo-logits-%d.f32" % n)
            runs[n], _ = self.launch(DEMO, "demo-%d" % n, "--prompt", DEMO_PROMPT, "--gen", "24", "--spec", str(n),
                                     "--dump-logits", logits, "--threads", "1")
            with open(logits, "rb") as f:
                runs[n]["logits"] = f.read()
        self.assertEqual(len(runs[0]["generated_ids"]), 24)
        self.assertEqual(runs[4]["generated_ids"], runs[0]["generated_ids"])
        self.assertEqual(runs[4]["generated_text"], runs[0]["generated_text"])
        self.assertEqual(runs[4]["logits"], runs[0]["logits"])
        self.assertGreater(runs[4]["spec_accepted"], 0, runs[4])

    def test_stop_id_inside_the_drafts(self):
        base, _ = self.launch(DEMO, "demo-free", "--prompt", DEMO_PROMPT, "--gen", "24", "--threads", "1")
        ids = base["generated_ids"]
        # A stop id deep in the continuation, where drafts run: its first occurrence ends it.
        stop = ids[10]
        expect = ids[:ids.index(stop) + 1]
        for n in (0, 4):
            with self.subTest(spec=n):
                rep, _ = self.launch(DEMO, "demo-stop-%d" % n, "--prompt", DEMO_PROMPT, "--gen", "24",
                                     "--spec", str(n), "--stop-ids", str(stop), "--threads", "1")
                self.assertEqual(rep["generated_ids"], expect)
                self.assertEqual(rep["finish_reason"], "stop")
                if n:
                    self.assertGreater(rep["spec_drafted"], 0)


if __name__ == "__main__":
    require(BIN and os.path.isdir(TINY), "K3_BIN / K3_TESTDATA not set")
    main()
