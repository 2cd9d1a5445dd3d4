"""Trunk-only copies (docs/k3-model.md): `k3-model trunk-only SRC DST` and `k3-model check`.

DST has SRC's files, every shard with SRC's size and SRC's bytes outside the routed experts,
whose ranges are holes (SEEK_DATA finds no data in any filesystem block inside an expert, and
DST's shards take fewer st_blocks than SRC's by at least those blocks). A run on DST with a
real k3-expert-server on 127.0.0.1 serving SRC gives the standalone ids of SRC; a run on DST
without a server is refused (exit 2, one line naming --expert-server). `k3-model check` tells a
complete release from a trunk-only copy, checks digests, and refuses a truncated shard and an
altered expert (exit 3). Expert ranges come from the headers through this suite's own parser.
Environment: K3_TESTDATA, K3_BIN (as test_pipeline.py).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_pipeline as tp  # noqa: E402
from expert_files import expert_ranges, standalone_ids, xor_expert  # noqa: E402
from proc_util import children_of, free_port, main, plan_floor, require, shm_names  # noqa: E402


def k3_model(*args):
    return subprocess.run([os.path.join(tp.BIN, "k3-model")] + list(args), capture_output=True, text=True,
                          timeout=tp.TIMEOUT, stdin=subprocess.DEVNULL)


def allocated(path):
    return os.stat(path).st_blocks * 512


class TrunkOnlyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.expected = standalone_ids(tp.BIN, tp.MODEL, tp.IDS, tp.GEN, tp.TIMEOUT)
        cls.tmp = tempfile.mkdtemp(prefix="k3-trunk-test-")
        cls.dst = os.path.join(cls.tmp, "trunk")
        r = k3_model("trunk-only", tp.MODEL, cls.dst)  # SRC has no manifest: its digests are taken now
        assert r.returncode == 0, r.stderr
        cls.copy_out = r.stdout
        cls.ranges = expert_ranges(tp.MODEL)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def shards(self):
        return sorted(f for f in os.listdir(tp.MODEL) if f.endswith(".safetensors"))

    def test_same_files_same_bytes_outside_the_experts(self):
        self.assertEqual(sorted(os.listdir(self.dst)), sorted(os.listdir(tp.MODEL) + ["k3-manifest.json"]))
        by_shard = {}
        for shard, b, e in self.ranges.values():
            by_shard.setdefault(shard, []).append((b, e))
        for shard in self.shards():
            with self.subTest(shard=shard):
                with open(os.path.join(tp.MODEL, shard), "rb") as f:
                    src = f.read()
                with open(os.path.join(self.dst, shard), "rb") as f:
                    dst = bytearray(f.read())
                self.assertEqual(len(dst), len(src))
                want = bytearray(src)
                for b, e in by_shard.get(shard, []):
                    self.assertEqual(dst[b:e], bytes(e - b), "an expert range holds data")
                    want[b:e] = bytes(e - b)
                self.assertEqual(dst, want, "bytes outside the expert ranges differ")
        for f in os.listdir(tp.MODEL):
            if not f.endswith(".safetensors"):
                with open(os.path.join(tp.MODEL, f), "rb") as a, open(os.path.join(self.dst, f), "rb") as b:
                    self.assertEqual(a.read(), b.read(), f)

    def test_expert_ranges_are_holes(self):
        block = os.statvfs(self.dst).f_bsize
        whole_blocks = 0
        for (layer, expert), (shard, b, e) in sorted(self.ranges.items()):
            first, last = -(-b // block) * block, e // block * block  # blocks entirely inside the expert
            if first >= last:
                continue
            whole_blocks += (last - first) // block
            fd = os.open(os.path.join(self.dst, shard), os.O_RDONLY)
            try:
                try:
                    data = os.lseek(fd, first, os.SEEK_DATA)
                except OSError:  # ENXIO: nothing but a hole up to the end of the file
                    data = os.path.getsize(os.path.join(self.dst, shard))
            finally:
                os.close(fd)
            self.assertGreaterEqual(data, last, "layer %d expert %d has data at byte %d" % (layer, expert, data))
        self.assertGreater(whole_blocks, 0, "no expert spans a whole block: the test checks nothing")
        src = sum(allocated(os.path.join(tp.MODEL, s)) for s in self.shards())
        dst = sum(allocated(os.path.join(self.dst, s)) for s in self.shards())
        self.assertLessEqual(dst, src - whole_blocks * block, (src, dst))

    def test_same_ids_through_an_expert_server(self):
        port = free_port()
        server = subprocess.Popen([os.path.join(tp.BIN, "k3-expert-server"), "--model", tp.MODEL, "--bind",
                                   "tcp://127.0.0.1:%d" % port], stderr=subprocess.PIPE, text=True)
        try:
            self.assertIn("serving on", server.stderr.readline())
            for budget in ("1G", None):  # everything read ahead; the floor (experts on demand)
                with self.subTest(budget=budget):
                    if budget is None:
                        budget = str(plan_floor(self.toml(), "--expert-server", "tcp://127.0.0.1:%d" % port,
                                                timeout=tp.TIMEOUT))
                    p = subprocess.Popen([os.path.join(tp.BIN, "k3-launch"), self.toml(), "--budget", budget, "--ids",
                                          tp.IDS, "--expert-server", "tcp://127.0.0.1:%d" % port],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    out, err = p.communicate(timeout=tp.TIMEOUT)
                    self.assertEqual(p.returncode, 0, err[-3000:])
                    self.assertEqual([int(x) for x in out.split()], self.expected)
                    self.assertIn("checked against %s" % os.path.join(self.dst, "k3-manifest.json"), err)
                    self.assertEqual(shm_names(p.pid), [])
                    self.assertEqual(children_of(p.pid), [])
        finally:
            server.send_signal(signal.SIGTERM)
            server.communicate(timeout=tp.TIMEOUT)
        self.assertEqual(server.returncode, 5)

    def toml(self):
        path = os.path.join(self.tmp, "trunk.toml")
        with open(path, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\nio = "pread"\ngen = %d\nthreads = 1\n' % (self.dst, tp.GEN))
        return path

    def test_local_experts_refused(self):
        r = subprocess.run([os.path.join(tp.BIN, "k3-launch"), self.toml(), "--ids", tp.IDS], capture_output=True,
                           text=True, timeout=tp.TIMEOUT)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr, r"\Ak3-launch: [^\n]*trunk-only copy[^\n]*--expert-server[^\n]*\n\Z")
        self.assertEqual(r.stdout, "")
        # Nor does k3-compute --standalone, which reads experts from the shards too.
        r = subprocess.run([os.path.join(tp.BIN, "k3-compute"), "--standalone", self.dst, "--ids", tp.IDS, "--gen", "1"],
                           capture_output=True, text=True, timeout=tp.TIMEOUT)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr, r"\Ak3-compute: [^\n]*trunk-only copy[^\n]*\n\Z")

    def test_check_tells_release_from_copy(self):
        r = k3_model("check", tp.MODEL)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("kind: complete release", r.stdout)
        self.assertIn("manifest: none", r.stdout)
        self.assertRegex(r.stdout, r"memory: floor [0-9.]+ [KMG]iB")
        self.assertRegex(r.stdout, r"budget: ")
        r = k3_model("check", self.dst, "--digests")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("kind: trunk-only copy", r.stdout)
        self.assertIn("--expert-server", r.stdout)
        self.assertIn("digests: not checked", r.stdout)
        # Without a manifest there is nothing to check digests against.
        r = k3_model("check", tp.MODEL, "--digests")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr, r"\Ak3-model: --digests: [^\n]*\n\Z")

    def test_check_digests_and_damage(self):
        full = os.path.join(self.tmp, "full")
        shutil.copytree(tp.MODEL, full)
        self.addCleanup(shutil.rmtree, full, True)
        r = k3_model("digest", full)
        self.assertEqual(r.returncode, 0, r.stderr)
        # The digests of a trunk-only copy of the same model are the same manifest, marked trunk-only.
        with open(os.path.join(full, "k3-manifest.json")) as a, open(os.path.join(self.dst, "k3-manifest.json")) as b:
            self.assertEqual(a.read().replace('"trunk_only": false', '"trunk_only": true'), b.read())
        r = k3_model("check", full, "--digests")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("digests: all %d experts match" % len(self.ranges), r.stdout)
        layer, expert = sorted(self.ranges)[len(self.ranges) // 2]
        xor_expert(full, layer, expert)
        r = k3_model("check", full)
        self.assertEqual(r.returncode, 0, r.stderr)  # without --digests the bytes are not read
        r = k3_model("check", full, "--digests")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertRegex(r.stderr.splitlines()[-1], r"^k3-model: .*layer %d expert %d does not match" % (layer, expert))
        # A shard cut short: the header refuses it, or the manifest's size does.
        shard = os.path.join(full, self.shards()[-1])
        os.truncate(shard, os.path.getsize(shard) - 1)
        r = k3_model("check", full)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertRegex(r.stderr, r"\Ak3-model: [^\n]*%s[^\n]*\n\Z" % re.escape(os.path.basename(shard)))
        # Digest and trunk-only refuse a trunk-only source; trunk-only refuses a used DST.
        r = k3_model("digest", self.dst)
        self.assertEqual(r.returncode, 2, r.stderr)
        r = k3_model("trunk-only", self.dst, os.path.join(self.tmp, "again"))
        self.assertEqual(r.returncode, 2, r.stderr)
        r = k3_model("trunk-only", tp.MODEL, self.dst)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr, r"\Ak3-model: [^\n]*not an empty directory\n\Z")


if __name__ == "__main__":
    require(tp.BIN and os.path.isdir(tp.MODEL), "K3_BIN / K3_TESTDATA not set")
    main()
