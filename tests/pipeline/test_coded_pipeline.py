"""The pipeline from a coded trunk (docs/pipeline.md "Coded trunk"; option coded_trunk).

On the demo's trained weights: `k3-model pack-trunk` writes the coded trunk, and k3-launch with
--coded-trunk gives the uncoded run's ids and first-token logits byte for byte at the coded
plan's floor (every layer streams, decoded from coded bytes), at a budget that pins some layers,
and resident, with --threads 1 and 2. The report shows the coded bytes read (fewer than they
decode to) and what bound the step. A coded byte changed on disk is refused when its run is
first read (exit 3, one line naming the run); a truncated data file before anything starts.
Environment: K3_BIN (as test_pipeline.py).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from proc_util import children_of, main, plan_floor, require, shm_names, start_launch  # noqa: E402

BIN = os.environ.get("K3_BIN", "")
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEMO = os.path.join(ROOT, "models", "k3-demo-tiny")
CONFIG = os.path.join(ROOT, "configs", "demo.toml")
IDS = "1,5,9,200,77,3"
GEN = 6
TIMEOUT = 300


class CodedPipelineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-coded-pipe-")
        cls.coded = os.path.join(cls.tmp, "coded")
        r = subprocess.run([os.path.join(BIN, "k3-model"), "--threads", "2", "pack-trunk", DEMO, cls.coded],
                           capture_output=True, text=True, timeout=TIMEOUT)
        assert r.returncode == 0, r.stderr
        # The uncoded reference: the release's bf16 bytes, every layer streamed.
        cls.floor = plan_floor(CONFIG)
        cls.coded_floor = plan_floor(CONFIG, "--coded-trunk", cls.coded)
        cls.ref_ids, cls.ref_logits, _, _ = cls.run_launch(cls.floor, 1, "ref")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def run_launch(cls, budget, threads, name, coded=None, expect=0):
        logits = os.path.join(cls.tmp, name + ".logits")
        out = os.path.join(cls.tmp, name + ".json")
        extra = ["--coded-trunk", coded] if coded else []
        p = start_launch(CONFIG, "--budget", budget, "--threads", threads, "--ids", IDS, "--gen", GEN,
                         "--ignore-eos", "--dump-logits", logits, *extra, out=out)
        stdout, stderr = p.communicate(timeout=TIMEOUT)
        assert shm_names(p.pid) == [] and children_of(p.pid) == [], "left behind after " + name
        assert p.returncode == expect, "%s: exit %d: %s" % (name, p.returncode, stderr[-3000:])
        if expect != 0:
            return None, None, None, stderr
        with open(logits, "rb") as f, open(out) as g:
            return [int(x) for x in stdout.split()], f.read(), json.load(g), stderr

    def pinned(self, budget):
        r = subprocess.run([os.path.join(BIN, "k3-launch"), CONFIG, "--budget", str(budget), "--dry-run",
                            "--coded-trunk", self.coded], capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(re.search(r"^pinned layers: (\d+) of", r.stdout, re.M).group(1))

    def test_coded_runs_equal_the_uncoded_run(self):
        self.assertEqual(len(self.ref_ids), GEN)
        self.assertGreater(len(self.ref_logits), 0)
        middle = self.coded_floor + (3 << 20)
        self.assertEqual(self.pinned(self.coded_floor), 0)
        self.assertGreater(self.pinned(middle), 0)
        cases = [(self.coded_floor, 1, "floor-t1"), (self.coded_floor, 2, "floor-t2"), (middle, 1, "middle-t1"),
                 ("2G", 2, "resident-t2")]
        for budget, threads, name in cases:
            with self.subTest(name):
                ids, logits, rep, err = self.run_launch(budget, threads, name, self.coded)
                self.assertEqual(ids, self.ref_ids, err[-2000:])
                self.assertTrue(logits == self.ref_logits, name + ": logits differ from the uncoded run")
                self.assertIn(rep["step_bound"], ("disk", "decode", "compute"))
                coded, decoded = rep["trunk_coded_bytes_per_token"], rep["trunk_decoded_bytes_per_token"]
                if name.startswith("resident"):
                    self.assertEqual(coded, 0)  # nothing streams: the pinned layers are the release's bytes
                else:
                    # Trained weights code to about 0.7 (the pack tool's target is 0.72); the read
                    # includes each layer's 4096-byte padding.
                    self.assertGreater(coded, 0, err[-2000:])
                    self.assertLess(coded, 0.8 * decoded)
                    self.assertRegex(err, r"\[launch\] coded trunk: \d+ B/token read, decoded to \d+ B/token")
                self.assertRegex(err, r"\[launch\] reads \d+ MB/s .*; the step was bound by (disk|decode|compute)\n")

    def test_changed_coded_byte_is_refused_when_read(self):
        bad = os.path.join(self.tmp, "changed")
        shutil.copytree(self.coded, bad)
        with open(os.path.join(bad, "k3-coded-trunk.json")) as f:
            run = [r for r in json.load(f)["runs"] if r["layer"] == 3][0]
        with open(os.path.join(bad, "k3-coded-trunk.bin"), "r+b") as f:
            f.seek(run["coded_offset"] + run["coded_bytes"] // 2)
            b = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b[0] ^ 0x01]))
        _, _, _, err = self.run_launch(self.coded_floor, 1, "changed", bad, expect=3)
        self.assertRegex(err.splitlines()[-1],
                         r"\Ak3-launch: trunk-reader: coded trunk run \d+ \(layer 3\): its coded bytes do not match "
                         r"the manifest's digest")

    def test_truncated_data_file_is_refused_before_start(self):
        bad = os.path.join(self.tmp, "truncated")
        shutil.copytree(self.coded, bad)
        data = os.path.join(bad, "k3-coded-trunk.bin")
        os.truncate(data, os.path.getsize(data) - 4096)
        _, _, _, err = self.run_launch(self.coded_floor, 1, "truncated", bad, expect=3)
        self.assertNotIn("ready", err)  # refused by the launcher, before any service started
        self.assertRegex(err, r"\Ak3-launch: [^\n]*k3-coded-trunk.bin[^\n]*\n\Z")


if __name__ == "__main__":
    require(os.path.isdir(DEMO), "no demo model at " + DEMO)
    main()
