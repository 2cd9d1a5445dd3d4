"""State files (--save-state / --load-state) with the real services on the tiny checkpoint.

Continuing a saved state equals running the concatenation in one go: the generated ids, the
logits choosing the first new token (--dump-logits) and the state saved at the end (every KDA,
conv and MLA-cache float, and the ids) are bit-identical, whatever budget, read backend and
thread count each run used, in k3-launch and in k3-compute --standalone, and across the two.
Bad files (a flipped byte, truncated, another checkpoint, another format version, more ids than
the context) are refused with exit 7 and one line, before any weight service starts.
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
from proc_util import last_line, main, plan_floor, require, run_launch  # noqa: E402

BIN = os.environ.get("K3_BIN", "")
TESTDATA = os.environ.get("K3_TESTDATA", "")
MODEL = os.path.join(TESTDATA, "tiny")
OTHER = os.path.join(TESTDATA, "tiny-s99-bf16")  # another generated checkpoint (seed 99)
P1 = [1, 5, 9, 200, 77, 3, 18, 42, 7, 300, 11]
G1 = 5
P2 = [64, 2, 150, 9]
G2 = 4
TIMEOUT = 300


def ids_arg(ids):
    return ",".join(str(i) for i in ids)


def read(path):
    with open(path, "rb") as f:
        return f.read()


class StateFilesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-state-test-")
        cls.toml = os.path.join(cls.tmp, "tiny.toml")
        with open(cls.toml, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\nio = "pread"\nthreads = 1\ncontext = 256\n' % MODEL)
        cls.floor = plan_floor(cls.toml, timeout=TIMEOUT)  # everything streams here
        # Run A: P1, G1 tokens, saved (streaming budget, pread, 1 thread).
        cls.a_state = cls.path("a.k3state")
        a = cls.launch(P1, G1, ["--budget", str(cls.floor), "--save-state", cls.a_state])
        assert a["code"] == 0, a["stderr"]
        cls.gen_a = a["report"]["generated_ids"]
        # (len, not G1: an end id may end it early once default end ids exist)
        assert len(cls.gen_a) >= 3 and a["report"]["position"] == len(P1) + len(cls.gen_a), a["report"]
        assert a["report"]["state_saved"] == cls.a_state
        # The reference: P1 + gen(A) + P2 in one go (resident budget, uring, 2 threads).
        cls.one_go = cls.launch(P1 + cls.gen_a + P2, G2,
                                ["--io", "uring", "--threads", "2", "--dump-logits", cls.path("c.logits"),
                                 "--save-state", cls.path("c.k3state")])
        assert cls.one_go["code"] == 0, cls.one_go["stderr"]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def path(cls, name):
        return os.path.join(cls.tmp, name)

    @classmethod
    def launch(cls, ids, gen, extra=(), model_toml=None):
        out = cls.path("report-%d.json" % len(os.listdir(cls.tmp)))
        r = run_launch(model_toml or cls.toml, "--ids", ids_arg(ids), "--gen", gen, *extra, out=out, timeout=TIMEOUT)
        return {"code": r.returncode, "stderr": r.stderr, "stdout": r.stdout,
                "report": r.report if r.returncode == 0 else None, "leftovers": r.leftovers}

    @classmethod
    def standalone(cls, ids, gen, extra=(), model=MODEL):
        args = [os.path.join(BIN, "k3-compute"), "--standalone", model, "--ids", ids_arg(ids), "--gen", str(gen)] + list(extra)
        r = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT)
        return r

    def assert_continues(self, b, logits, state):
        """Run B's ids, first logits and final state equal the one-go run's, bit for bit."""
        self.assertEqual(b["report"]["generated_ids"], self.one_go["report"]["generated_ids"])
        self.assertEqual(read(logits), read(self.path("c.logits")))
        self.assertEqual(read(state), read(self.path("c.k3state")))

    def test_continue_equals_one_go_in_the_pipeline(self):
        for i, (budget, io, threads) in enumerate([("1G", "mmap", "2"), (str(self.floor), "direct", "1")]):
            with self.subTest(budget=budget, io=io, threads=threads):
                logits, state = self.path("b%d.logits" % i), self.path("b%d.k3state" % i)
                b = self.launch(P2, G2, ["--load-state", self.a_state, "--budget", budget, "--io", io,
                                         "--threads", threads, "--dump-logits", logits, "--save-state", state])
                self.assertEqual(b["code"], 0, b["stderr"])
                self.assertEqual(b["report"]["state_loaded_tokens"], len(P1) + len(self.gen_a))
                self.assertEqual(b["report"]["position"],
                                 len(P1) + len(self.gen_a) + len(P2) + len(b["report"]["generated_ids"]))
                self.assertEqual(b["report"]["prompt_ids"], P2)
                self.assert_continues(b, logits, state)
                # This run's own segments and children only: other tests' runs may be live (ctest -j).
                self.assertEqual(b["leftovers"], [])

    def test_the_check_can_fail(self):
        # The same P2 without the loaded state gives other logits: the comparison above sees
        # whether the state was used.
        logits = self.path("fresh.logits")
        b = self.launch(P2, G2, ["--dump-logits", logits])
        self.assertEqual(b["code"], 0, b["stderr"])
        self.assertNotEqual(read(logits), read(self.path("c.logits")))

    def test_standalone_and_pipeline_states_are_interchangeable(self):
        # Standalone continues the pipeline's state...
        logits, state = self.path("s.logits"), self.path("s.k3state")
        r = self.standalone(P2, G2, ["--load-state", self.a_state, "--threads", "2", "--dump-logits", logits,
                                     "--save-state", state, "--out", self.path("s.json")])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.path("s.json")) as f:
            rep = json.load(f)
        self.assertEqual(rep["generated_ids"], self.one_go["report"]["generated_ids"])
        self.assertEqual(rep["full_ids"], P1 + self.gen_a + P2 + rep["generated_ids"])
        self.assertEqual(rep["state_loaded_tokens"], len(P1) + len(self.gen_a))
        self.assertEqual(read(logits), read(self.path("c.logits")))
        self.assertEqual(read(state), read(self.path("c.k3state")))
        # --full-recompute (every step from nothing) continues it too: same ids, logits, state.
        fr_logits, fr_state = self.path("fr.logits"), self.path("fr.k3state")
        r = self.standalone(P2, G2, ["--load-state", self.a_state, "--full-recompute", "--dump-logits", fr_logits,
                                     "--save-state", fr_state])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([int(x) for x in r.stdout.split()], self.one_go["report"]["generated_ids"])
        self.assertEqual(read(fr_logits), read(self.path("c.logits")))
        self.assertEqual(read(fr_state), read(self.path("c.k3state")))
        # ...and the pipeline continues a standalone state, saved after a chunked prefill.
        sa = self.path("sa.k3state")
        r = self.standalone(P1, G1, ["--threads", "1", "--prefill-chunk", "3", "--save-state", sa])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(read(sa), read(self.a_state))
        logits2 = self.path("p.logits")
        b = self.launch(P2, G2, ["--load-state", sa, "--dump-logits", logits2, "--save-state", self.path("p.k3state")])
        self.assertEqual(b["code"], 0, b["stderr"])
        self.assert_continues(b, logits2, self.path("p.k3state"))

    def test_states_after_a_stop_id_and_after_a_prefill_only_run(self):
        # Ended by a stop id (the stop id is the last id, not consumed yet) and --gen 0 (every id
        # consumed): both continue like one run of the whole sequence.
        for name, gen, extra in [("stop", G1, ["--stop-ids", str(self.gen_a[2])]), ("prefill", 0, [])]:
            with self.subTest(name):
                state = self.path("%s.k3state" % name)
                a = self.launch(P1, gen, ["--save-state", state] + extra)
                self.assertEqual(a["code"], 0, a["stderr"])
                made = a["report"]["generated_ids"]
                if name == "stop":
                    self.assertIn(a["report"]["finish_reason"], ("stop_id", "stop"))  # issue 13 renames it "stop"
                    self.assertEqual(made[-1], self.gen_a[2])
                b_logits, c_logits = self.path("%s-b.logits" % name), self.path("%s-c.logits" % name)
                b = self.launch(P2, G2, ["--load-state", state, "--dump-logits", b_logits, "--io", "mmap"])
                c = self.launch(P1 + made + P2, G2, ["--dump-logits", c_logits, "--threads", "2"])
                self.assertEqual(b["code"], 0, b["stderr"])
                self.assertEqual(c["code"], 0, c["stderr"])
                self.assertEqual(b["report"]["state_loaded_tokens"], len(P1) + len(made))
                self.assertEqual(b["report"]["generated_ids"], c["report"]["generated_ids"])
                self.assertEqual(read(b_logits), read(c_logits))

    def refused(self, state, extra=(), contains=""):
        """k3-launch and k3-compute --standalone refuse `state`: exit 7, one line, no service."""
        b = self.launch(P2, G2, ["--load-state", state] + list(extra))
        self.assertEqual(b["code"], 7, b["stderr"])
        line = last_line(b["stderr"])
        self.assertTrue(line.startswith("k3-launch: "), line)
        self.assertIn(contains, line)
        self.assertEqual(sum("state file" in l for l in b["stderr"].splitlines()), 1, b["stderr"])
        self.assertNotIn("ready", b["stderr"])  # refused before any service started
        self.assertEqual(b["stdout"], "")
        if not extra:
            r = self.standalone(P2, G2, ["--load-state", state])
            self.assertEqual(r.returncode, 7, r.stderr)
            self.assertIn(contains, last_line(r.stderr))
            self.assertNotIn("loading", r.stderr)  # refused before the weights are mapped
        return line

    def test_bad_files_are_refused(self):
        good = read(self.a_state)
        cases = {
            "corrupt": (good[:len(good) // 2] + bytes([good[len(good) // 2] ^ 0x01]) + good[len(good) // 2 + 1:],
                        "checksum"),
            "truncated": (good[:-100], "truncated"),
            "version": (good[:8] + bytes([9]) + good[9:], "version 9"),
            "empty": (b"", "truncated"),
        }
        for name, (data, contains) in cases.items():
            with self.subTest(name):
                p = self.path("bad-%s.k3state" % name)
                with open(p, "wb") as f:
                    f.write(data)
                self.refused(p, contains=contains)
        with self.subTest("missing"):
            self.refused(self.path("no-such.k3state"), contains="cannot read")

    def test_state_of_another_checkpoint_is_refused(self):
        other = self.path("other.k3state")
        r = self.standalone(P1, 2, ["--threads", "1", "--save-state", other], model=OTHER)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.refused(other, contains="another model")

    def test_context_and_expert_inputs_are_checked(self):
        # n ids in the state: a context of n - 1 cannot hold them (exit 7 before the weights);
        # one of n + 2 holds them but not the 4 new prompt ids (exit 2, naming the context).
        n = len(P1) + len(self.gen_a)
        self.refused(self.a_state, ["--context", str(n - 1)], contains="context")
        b = self.launch(P2, G2, ["--load-state", self.a_state, "--context", str(n + 2)])
        self.assertEqual(b["code"], 2, b["stderr"])
        self.assertIn(str(n + 2), last_line(b["stderr"]))
        # Saved with f32 expert inputs: a bf16 run would not continue it exactly.
        self.refused(self.a_state, ["--expert-inputs", "bf16"], contains="expert_inputs")

    def test_toml_keys(self):
        toml = self.path("keys.toml")
        state = self.path("toml.k3state")
        with open(toml, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\nthreads = 1\nload_state = "%s"\nsave_state = "%s"\n'
                    % (MODEL, self.a_state, state))
        b = self.launch(P2, G2, model_toml=toml)
        self.assertEqual(b["code"], 0, b["stderr"])
        self.assertEqual(b["report"]["generated_ids"], self.one_go["report"]["generated_ids"])
        self.assertEqual(read(state), read(self.path("c.k3state")))


if __name__ == "__main__":
    require(BIN and os.path.isdir(MODEL) and os.path.isdir(OTHER), "K3_BIN / K3_TESTDATA not set")
    main()
