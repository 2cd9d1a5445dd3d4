"""Verified bytes from a k3-expert-server (docs/formats.md "Expert manifest", docs/k3-model.md).

`k3-model digest` writes the manifest of a trusted copy of the tiny checkpoint; a real
k3-expert-server on 127.0.0.1 serves a second copy. An honest server gives the standalone
ids with every expert checked; a server whose copy had bytes of one layer's experts XORed
on disk ends the run with exit 1 naming layer, expert and server (with --no-verify the same
server changes the text, which is the attack); remote mode without a manifest is refused
(exit 2, one line); a corrupt or truncated manifest is refused (exit 3); `--manifest` and the
TOML keys `manifest` / `no_verify` work. No shared memory or process is left behind.
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
from proc_util import free_port, last_line, main, plan_floor, require, run_launch  # noqa: E402

ROGUE_LAYER = 5


class ExpertVerifyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.expected = standalone_ids(tp.BIN, tp.MODEL, tp.IDS, tp.GEN, tp.TIMEOUT)
        cls.tmp = tempfile.mkdtemp(prefix="k3-verify-test-")
        # The compute box's copy (with the manifest) and the servers' copies.
        cls.client = os.path.join(cls.tmp, "client")
        shutil.copytree(tp.MODEL, cls.client)
        r = subprocess.run([os.path.join(tp.BIN, "k3-model"), "digest", cls.client], capture_output=True, text=True,
                           timeout=tp.TIMEOUT)
        assert r.returncode == 0, r.stderr
        cls.rogue = os.path.join(cls.tmp, "rogue")
        shutil.copytree(tp.MODEL, cls.rogue)
        experts = sorted(e for (l, e) in expert_ranges(cls.rogue) if l == ROGUE_LAYER)
        assert experts, "no routed experts in layer %d" % ROGUE_LAYER
        for e in experts:  # every expert of the layer: whichever the prompt routes to is altered
            xor_expert(cls.rogue, ROGUE_LAYER, e)
        cls.toml = os.path.join(cls.tmp, "client.toml")
        with open(cls.toml, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\nio = "pread"\ngen = %d\nthreads = 1\n' % (cls.client, tp.GEN))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def start_server(self, model):
        port = free_port()
        p = subprocess.Popen([os.path.join(tp.BIN, "k3-expert-server"), "--model", model, "--bind",
                              "tcp://127.0.0.1:%d" % port], stderr=subprocess.PIPE, text=True)
        self.assertIn("serving on", p.stderr.readline())
        self.addCleanup(self.stop_server, p)
        return "tcp://127.0.0.1:%d" % port

    def stop_server(self, p):
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=tp.TIMEOUT)
        self.assertEqual(p.returncode, 5)

    def launch(self, *extra, toml=None, budget=None):
        r = run_launch(toml or self.toml, "--ids", tp.IDS, *(["--budget", budget] if budget else []), *extra,
                       out=os.path.join(self.tmp, "report.json"), timeout=tp.TIMEOUT)
        self.assertEqual(r.leftovers, [], "shared memory or processes left behind")
        return r.returncode, r.stdout, r.stderr, r.report

    def stream_budget(self, server):
        # The plan's floor with the server's frames: few expert slots, so experts are read on demand.
        return plan_floor(self.toml, "--expert-server", server, timeout=tp.TIMEOUT)

    def test_honest_server_every_expert_checked(self):
        server = self.start_server(tp.MODEL)
        for budget in (self.stream_budget(server), None):  # on demand, and everything read ahead
            with self.subTest(budget=budget):
                rc, out, err, report = self.launch("--expert-server", server, budget=budget)
                self.assertEqual(rc, 0, err[-3000:])
                self.assertEqual([int(x) for x in out.split()], self.expected)
                self.assertIn("checked against %s" % os.path.join(self.client, "k3-manifest.json"), err)
                stats = report["service_stats"]["expert-fetcher"]
                self.assertGreater(stats["verified_experts"], 0)
                self.assertEqual(stats["manifest_mismatches"], 0)

    def test_rogue_bytes_detected(self):
        server = self.start_server(self.rogue)
        for budget in (self.stream_budget(server), None):
            with self.subTest(budget=budget):
                rc, out, err, _ = self.launch("--expert-server", server, budget=budget)
                self.assertEqual(rc, 1, err[-3000:])
                line = last_line(err)
                self.assertRegex(line, r"^k3-launch: .*layer %d expert \d+: bytes from expert server %s do not "
                                 r"match the manifest " % (ROGUE_LAYER, re.escape(server)), err[-3000:])
                self.assertEqual(out.split(), [str(x) for x in self.expected[:len(out.split())]],
                                 "a token computed from unchecked bytes")
        # The same server without the check changes the text: that is what the manifest stops.
        rc, out, err, _ = self.launch("--expert-server", server, "--no-verify")
        self.assertEqual(rc, 0, err[-3000:])
        self.assertNotEqual([int(x) for x in out.split()], self.expected)

    def test_remote_without_manifest_refused(self):
        server = self.start_server(tp.MODEL)
        bare = os.path.join(self.tmp, "bare.toml")
        with open(bare, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\ngen = %d\nthreads = 1\n' % (tp.MODEL, tp.GEN))
        rc, out, err, _ = self.launch("--expert-server", server, toml=bare)
        self.assertEqual(rc, 2, err)
        self.assertRegex(err, r"\Ak3-launch: experts from an expert server need a manifest [^\n]*--no-verify\)\n\Z")
        self.assertEqual(out, "")
        # --no-verify on the command line, or no_verify in the TOML.
        rc, out, err, _ = self.launch("--expert-server", server, "--no-verify", toml=bare)
        self.assertEqual((rc, [int(x) for x in out.split()]), (0, self.expected), err[-3000:])
        with open(bare, "a") as f:
            f.write('no_verify = true\nexpert_server = "%s"\n' % server)
        rc, out, err, _ = self.launch(toml=bare)
        self.assertEqual((rc, [int(x) for x in out.split()]), (0, self.expected), err[-3000:])
        self.assertNotIn("checked against", err)

    def test_manifest_elsewhere(self):
        server = self.start_server(tp.MODEL)
        path = os.path.join(self.tmp, "elsewhere.json")
        shutil.copy(os.path.join(self.client, "k3-manifest.json"), path)
        rc, out, err, _ = self.launch("--expert-server", server, "--model", tp.MODEL, "--manifest", path)
        self.assertEqual((rc, [int(x) for x in out.split()]), (0, self.expected), err[-3000:])
        self.assertIn("checked against %s" % path, err)
        toml = os.path.join(self.tmp, "elsewhere.toml")
        with open(toml, "w") as f:  # relative to the TOML's directory
            f.write('model = "%s"\nbudget = "1G"\ngen = %d\nthreads = 1\nmanifest = "elsewhere.json"\n'
                    'expert_server = "%s"\n' % (tp.MODEL, tp.GEN, server))
        rc, out, err, _ = self.launch(toml=toml)
        self.assertEqual((rc, [int(x) for x in out.split()]), (0, self.expected), err[-3000:])
        self.assertIn("checked against %s" % path, err)

    def test_corrupt_manifest_refused(self):
        server = self.start_server(tp.MODEL)
        with open(os.path.join(self.client, "k3-manifest.json")) as f:
            good = f.read()
        first = re.search(r'"([0-9a-f]{64})"', good).group(1)
        cases = {"truncated": good[:len(good) // 2],
                 "empty": "",
                 "bad digest": good.replace(first, first[:40] + "zz" + first[42:], 1),
                 "digest missing": good.replace('\n    "%s",' % first, "", 1),
                 "version 9": good.replace('"version": 1', '"version": 9', 1)}
        for what, text in cases.items():
            with self.subTest(what=what):
                self.assertNotEqual(text, good)
                path = os.path.join(self.tmp, "bad-manifest.json")
                with open(path, "w") as f:
                    f.write(text)
                rc, out, err, _ = self.launch("--expert-server", server, "--manifest", path)
                self.assertEqual(rc, 3, err)
                self.assertRegex(err, r"\Ak3-launch: %s[: ][^\n]*\n\Z" % re.escape(path))


if __name__ == "__main__":
    require(tp.BIN and os.path.isdir(tp.MODEL), "K3_BIN / K3_TESTDATA not set")
    main()
