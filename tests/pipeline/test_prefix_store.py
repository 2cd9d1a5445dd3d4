"""The persistent prefix store (--prefix-store DIR) across separate k3-launch runs on the tiny checkpoint.

A second run whose prompt starts with the first run's prompt reports the stored prefix as
cached_tokens (exactly the first prompt minus its last id) and gets the generated ids and
first-token logits of a run without the store; a prompt that sends a run's reply back starts
after that reply (the store keeps each sequence's end). An entry replaced by another model's snapshot
of the same ids, or a truncated one, is skipped with one warning line and not used. A store
path that cannot be a directory is one warning, and the run goes on.
Environment: K3_TESTDATA (fixture dir), K3_BIN (directory with the binaries).
"""
import glob
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import main, require, run_launch  # noqa: E402

TESTDATA = os.environ.get("K3_TESTDATA", "")
MODEL = os.path.join(TESTDATA, "tiny")
OTHER = os.path.join(TESTDATA, "tiny-s99-bf16")  # another generated checkpoint (seed 99)
P = [1, 5, 9, 200, 77, 3, 18, 42, 7, 300, 11, 64, 2]
Q = [150, 9, 33, 4]
GEN = 4
TIMEOUT = 300


def read(path):
    with open(path, "rb") as f:
        return f.read()


class PrefixStoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-store-test-")
        cls.tomls = {}
        for name, model in (("tiny", MODEL), ("other", OTHER)):
            cls.tomls[name] = os.path.join(cls.tmp, name + ".toml")
            with open(cls.tomls[name], "w") as f:
                f.write('model = "%s"\nbudget = "1G"\nio = "pread"\nthreads = 1\ncontext = 256\nprefill_chunk = 4\n'
                        % model)
        # The reference: P + Q prefilled from nothing, no store.
        cls.ref = cls.launch("tiny", P + Q, [], "ref")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def launch(cls, model, ids, extra, tag):
        out = os.path.join(cls.tmp, tag + ".json")
        logits = os.path.join(cls.tmp, tag + ".logits")
        r = run_launch(cls.tomls[model], "--ids", ",".join(map(str, ids)), "--gen", GEN, "--dump-logits", logits,
                       *extra, out=out, timeout=TIMEOUT)
        assert r.returncode == 0, r.stderr
        return {"report": r.report, "stderr": r.stderr, "logits": read(logits)}

    def store(self, name):
        d = os.path.join(self.tmp, name)
        return d, ["--prefix-store", d, "--prefix-store-size", "64M"]

    def assert_like_ref(self, run, cached, what):
        self.assertEqual(run["report"]["cached_tokens"], cached, what)
        self.assertEqual(run["report"]["generated_ids"], self.ref["report"]["generated_ids"], what)
        self.assertEqual(run["logits"], self.ref["logits"], what + ": first-token logits differ")

    def test_a_second_run_starts_from_the_first_runs_prompt(self):
        d, flags = self.store("s1")
        first = self.launch("tiny", P, flags, "s1-first")
        self.assertEqual(first["report"]["cached_tokens"], 0)
        self.assertTrue(glob.glob(os.path.join(d, "k3p-*-%d-*.k3state" % (len(P) - 1))), os.listdir(d))
        second = self.launch("tiny", P + Q, flags, "s1-second")
        self.assert_like_ref(second, len(P) - 1, "from the store")
        self.assertIn("prompt ids from a prefix snapshot", second["stderr"])
        # The check can fail: without the store the same prompt reports nothing reused.
        self.assertEqual(self.ref["report"]["cached_tokens"], 0)

    def test_a_run_continues_from_the_end_of_the_last(self):
        # The store keeps a sequence's end (all but the last generated id, never fed): a next
        # prompt that sends the reply back (a chat's next turn) starts after it, the same ids and
        # logits as prefilling it from nothing.
        d, flags = self.store("s4")
        first = self.launch("tiny", P, flags, "s4-first")
        gen = first["report"]["generated_ids"]
        self.assertGreater(len(gen), 1)
        ids = P + gen + Q
        fresh = self.launch("tiny", ids, [], "s4-fresh")
        cont = self.launch("tiny", ids, flags, "s4-cont")
        self.assertEqual(fresh["report"]["cached_tokens"], 0)
        self.assertEqual(cont["report"]["cached_tokens"], len(P) + len(gen) - 1)
        self.assertEqual(cont["report"]["generated_ids"], fresh["report"]["generated_ids"])
        self.assertEqual(cont["logits"], fresh["logits"], "first-token logits differ")

    def test_foreign_and_truncated_entries_are_skipped_with_a_warning(self):
        d, flags = self.store("s2")
        self.launch("tiny", P, flags, "s2-tiny")
        self.launch("other", P, flags, "s2-other")  # the other model's snapshot of the same ids
        mine = sorted(glob.glob(os.path.join(d, "k3p-*-%d-*.k3state" % (len(P) - 1))))
        self.assertEqual(len(mine), 2, os.listdir(d))  # two models, one directory, one entry each
        # The other model reads its own entry (the name carries the model): the files are sound.
        self.assertEqual(self.launch("other", P + Q, flags, "s2-other-2")["report"]["cached_tokens"], len(P) - 1)
        # Swap: each file now holds the other model's snapshot under its own model's name.
        a, b = read(mine[0]), read(mine[1])
        with open(mine[0], "wb") as f:
            f.write(b)
        with open(mine[1], "wb") as f:
            f.write(a)
        run = self.launch("tiny", P + Q, flags, "s2-foreign")
        self.assert_like_ref(run, 0, "foreign entry")
        warnings = [l for l in run["stderr"].splitlines() if l.startswith("k3-compute: warning: prefix store")]
        self.assertEqual(len(warnings), 1, run["stderr"])
        self.assertIn("from another model", warnings[0])
        # Truncated (every entry, the one the last run wrote for P + Q too): skipped as well.
        for p in glob.glob(os.path.join(d, "k3p-*.k3state")):
            with open(p, "r+b") as f:
                f.truncate(os.path.getsize(p) - 100)
        run = self.launch("tiny", P + Q, flags, "s2-truncated")
        self.assert_like_ref(run, 0, "truncated entry")
        self.assertIn("truncated", run["stderr"])

    def test_a_store_that_cannot_be_a_directory_is_one_warning(self):
        path = os.path.join(self.tmp, "a-file")
        with open(path, "w") as f:
            f.write("x")
        run = self.launch("tiny", P + Q, ["--prefix-store", os.path.join(path, "sub")], "s3")
        self.assert_like_ref(run, 0, "no store")
        warnings = [l for l in run["stderr"].splitlines() if "prefix store" in l and "warning" in l]
        self.assertEqual(len(warnings), 1, run["stderr"])


if __name__ == "__main__":
    require(os.path.isdir(MODEL) and os.path.isdir(OTHER), "K3_TESTDATA with tiny and tiny-s99-bf16 is needed")
    main()
