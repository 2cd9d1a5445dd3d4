"""Routed experts from a k3-expert-server over tcp:// (docs/pipeline.md "Remote expert server").

A real k3-expert-server process on 127.0.0.1 serves the tiny checkpoint; k3-launch runs with
`--expert-server` (or the TOML key), so its fetcher reads every expert over TCP with XXH3
checks instead of from the shards. The ids must equal the standalone k3-compute ids at a
budget that streams everything, one that pins every layer (next-layer hints on) and one that
holds everything; a server that comes up after the run started is waited for; junk sent to
the server is rejected and counted while it keeps serving; a server that never answers ends
the run with exit 1 and a one-line reason. No shared memory or process is left behind.
Environment: K3_TESTDATA, K3_BIN (as test_pipeline.py).
"""
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_pipeline as tp  # noqa: E402
from proc_util import free_port, main, plan_floor, require, run_launch, shm_names  # noqa: E402
from test_tokenizer_pipeline import send_malformed  # noqa: E402


class RemoteExpertsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The budgets and the standalone ids of the pipeline tests.
        tp.PipelineTest.setUpClass()
        cls.base = tp.PipelineTest
        cls.expected = cls.base.expected
        cls.tmp = tempfile.mkdtemp(prefix="k3-remote-test-")
        # With an expert server the plan also holds the fetcher's frames in flight, so every
        # budget of the pipeline tests grows by that much (the floor difference) to keep its plan.
        cls.extra = plan_floor(cls.base.toml, "--expert-server", "tcp://127.0.0.1:1", timeout=tp.TIMEOUT) - cls.base.floor
        assert cls.extra > 0, "the expert server's frames are not in the plan"


    def start_server(self, port):
        p = subprocess.Popen([os.path.join(tp.BIN, "k3-expert-server"), "--model", tp.MODEL, "--bind",
                              "tcp://127.0.0.1:%d" % port], stderr=subprocess.PIPE, text=True)
        line = p.stderr.readline()  # "... serving on tcp://..." once bound
        self.assertIn("serving on", line)
        return p

    def stop_server(self, p):
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=tp.TIMEOUT)
        self.assertEqual(p.returncode, 5, err)  # stopped by a signal (docs/exit-codes.md)
        return err

    def launch(self, budget, port, extra=(), toml=None):
        out_json = os.path.join(self.tmp, "remote-%d.json" % budget)
        server = ["--expert-server", "tcp://127.0.0.1:%d" % port, "--no-verify"] if port else []
        r = run_launch(toml or self.base.toml, "--budget", budget, "--ids", tp.IDS, *server, *extra, out=out_json,
                       timeout=tp.TIMEOUT)
        self.assertEqual(r.leftovers, [], "shared memory or processes left behind")
        return r.returncode, r.stdout, r.stderr, out_json

    def test_same_ids_through_the_server(self):
        port = free_port()
        server = self.start_server(port)
        try:
            self.assertEqual(send_malformed("tcp://127.0.0.1:%d" % port), 3)
            hints_budget = self.base.hint_budgets()[0]
            for budget in (self.base.budgets["stream"], hints_budget, self.base.budgets["pinned"]):
                with self.subTest(budget=budget):
                    rc, out, err, _ = self.launch(budget + self.extra, port)
                    self.assertEqual(rc, 0, err[-3000:])
                    self.assertEqual([int(x) for x in out.split()], self.expected)
                    self.assertIn("routed experts come from the expert server at tcp://127.0.0.1:%d" % port, err)
                    if budget == hints_budget:
                        self.assertIn("next-layer expert hints: recall", err)
        finally:
            err = self.stop_server(server)
        # "[expert-server] stats: N experts sent, ..., F failed, R rejected messages"
        stats = [l for l in err.splitlines() if l.startswith("[expert-server] stats:")][0]
        sent = int(stats.split("stats: ")[1].split(" experts sent")[0])
        self.assertGreater(sent, 0, stats)
        self.assertIn(" 0 failed", stats)
        self.assertIn(" 3 rejected messages", stats)

    def test_server_started_after_the_run(self):
        # The fetcher's requests wait in ZeroMQ until the server is there (TOML key this time).
        port = free_port()
        toml = os.path.join(self.tmp, "late.toml")
        with open(toml, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\nio = "pread"\ngen = %d\nthreads = 1\n'
                    'expert_server = "tcp://127.0.0.1:%d"\nexpert_server_timeout = 60\nno_verify = true\n'
                    % (tp.MODEL, tp.GEN, port))
        out_json = os.path.join(self.tmp, "late.json")
        p = subprocess.Popen([os.path.join(tp.BIN, "k3-launch"), toml, "--budget",
                              str(self.base.budgets["stream"] + self.extra),
                              "--ids", tp.IDS, "--out", out_json], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        time.sleep(1.5)
        self.assertIsNone(p.poll(), "the run ended before the server was up")
        server = self.start_server(port)
        try:
            out, err = p.communicate(timeout=tp.TIMEOUT)
        finally:
            self.stop_server(server)
        self.assertEqual(p.returncode, 0, err[-3000:])
        self.assertEqual([int(x) for x in out.split()], self.expected)
        self.assertEqual(shm_names(p.pid), [])

    def test_silent_server_ends_the_run(self):
        port = free_port()  # nothing listens there
        toml = os.path.join(self.tmp, "silent.toml")
        with open(toml, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\nio = "pread"\ngen = %d\nthreads = 1\nexpert_server_timeout = 1.5\n'
                    % (tp.MODEL, tp.GEN))
        t0 = time.time()
        rc, out, err, _ = self.launch(self.base.budgets["stream"] + self.extra, port, toml=toml)
        self.assertEqual(rc, 1, err[-3000:])
        self.assertIn("expert server tcp://127.0.0.1:%d did not answer within 1.5 s" % port, err)
        self.assertLess(time.time() - t0, 60)

    def test_bad_endpoint_is_a_usage_error(self):
        r = subprocess.run([os.path.join(tp.BIN, "k3-launch"), self.base.toml, "--ids", tp.IDS,
                            "--expert-server", "localhost:5557"], capture_output=True, text=True, timeout=tp.TIMEOUT)
        self.assertEqual(r.returncode, 2)
        self.assertIn("expert_server", r.stderr)


if __name__ == "__main__":
    require(tp.BIN and os.path.isdir(tp.MODEL), "K3_BIN / K3_TESTDATA not set")
    main()
