"""Several k3-expert-servers (docs/pipeline.md "Several expert servers").

Three real k3-expert-server processes on 127.0.0.1 serve the tiny checkpoint; k3-launch runs
with `--expert-server` three times and `--expert-slots 2` (top_k of the tiny model), so nearly
every expert is a miss read from a server throughout the run. Checked: the ids equal a run
that reads the local shards with the same slots; the report's per-server stats show all three
used; kill -9 of one server and then a second in the middle of a long run still gives the
local run's ids, with both marked dropped and the third carrying on; with all three killed the
run ends with exit 1 and one line naming every server. The dry run shows the remote-frames
region for three servers (three times one server's) and the --expert-slots cap; a cap below
top_k is refused with exit 2. No shared memory or process is left behind.
Environment: K3_TESTDATA, K3_BIN (as test_pipeline.py).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import children_of, floor_bytes, free_port, last_line, main, require, shm_names  # noqa: E402

BIN = os.environ.get("K3_BIN", "")
MODEL = os.path.join(os.environ.get("K3_TESTDATA", ""), "tiny")
IDS = "1,5,9,200,77,3,18,42"
TIMEOUT = 300
SLOTS = "2"  # the tiny model's top_k: one token's experts, so nearly every expert is read


def read(path):
    with open(path) as f:
        return f.read()


def launch_extra(bin_dir):
    """Flags later versions of k3-launch need for a server without a digest manifest."""
    h = subprocess.run([os.path.join(bin_dir, "k3-launch"), "--help"], capture_output=True, text=True).stdout
    return ["--no-verify"] if "--no-verify" in h else []


class ExpertServersTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-servers-test-")
        cls.toml = os.path.join(cls.tmp, "tiny.toml")
        with open(cls.toml, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\nio = "pread"\nthreads = 1\nexpert_server_timeout = 4\n' % MODEL)
        cls.extra = launch_extra(BIN)
        cls.reference = {}

    def setUp(self):
        self.servers = []

    def tearDown(self):
        for p in self.servers:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=TIMEOUT)

    def start_servers(self, n=3):
        eps = []
        for _ in range(n):
            ep = "tcp://127.0.0.1:%d" % free_port()
            p = subprocess.Popen([os.path.join(BIN, "k3-expert-server"), "--model", MODEL, "--bind", ep],
                                 stderr=subprocess.PIPE, text=True)
            self.servers.append(p)
            self.assertIn("serving on", p.stderr.readline())
            eps.append(ep)
        return eps

    def args(self, gen, eps, out_json):
        # --ignore-eos: the long runs must read experts to the end, past any end id the model emits.
        a = [os.path.join(BIN, "k3-launch"), self.toml, "--ids", IDS, "--gen", str(gen), "--ignore-eos", "--expert-slots", SLOTS,
             "--out", out_json]
        for ep in eps:
            a += ["--expert-server", ep]
        return a + (self.extra if eps else [])

    def finish(self, p, out_json=None):
        out, err = p.communicate(timeout=TIMEOUT)
        self.assertEqual(shm_names(p.pid), [], "shared memory left behind")
        self.assertEqual(children_of(p.pid), [], "processes left behind")
        report = None
        if out_json and p.returncode == 0:
            with open(out_json) as f:
                report = json.load(f)
        return p.returncode, out, err, report

    def local_ids(self, gen):
        """The ids of a run that reads the experts from the local shards, same slots."""
        if gen not in self.reference:
            out_json = os.path.join(self.tmp, "local-%d.json" % gen)
            rc, out, err, report = self.finish(subprocess.Popen(self.args(gen, [], out_json), stdout=subprocess.PIPE,
                                                                stderr=subprocess.PIPE, text=True), out_json)
            self.assertEqual(rc, 0, err[-3000:])
            self.assertGreater(report["service_stats"]["expert-fetcher"]["misses"], gen,
                               "--expert-slots did not force misses")
            self.reference[gen] = [int(x) for x in out.split()]
            self.assertEqual(len(self.reference[gen]), gen)
        return self.reference[gen]

    def test_three_servers_give_the_local_ids_and_all_are_used(self):
        eps = self.start_servers()
        out_json = os.path.join(self.tmp, "three.json")
        rc, out, err, report = self.finish(subprocess.Popen(self.args(64, eps, out_json), stdout=subprocess.PIPE,
                                                            stderr=subprocess.PIPE, text=True), out_json)
        self.assertEqual(rc, 0, err[-3000:])
        self.assertEqual([int(x) for x in out.split()], self.local_ids(64))
        self.assertIn("routed experts come from the expert servers at " + ", ".join(eps), err)
        fetcher = report["service_stats"]["expert-fetcher"]
        self.assertGreater(fetcher["misses"], 64 * 2, "experts were not read throughout the run")
        servers = report["expert_servers"]
        self.assertEqual([s["endpoint"] for s in servers], eps)
        for s in servers:
            self.assertGreater(s["experts"], 0, s)
            self.assertGreater(s["bytes"], 0, s)
            self.assertGreater(s["seconds"], 0, s)
            self.assertFalse(s["dropped"], s)
            self.assertEqual(s["failures"], 0, s)
            self.assertIn("[launch] expert server %s: %d experts" % (s["endpoint"], s["experts"]), err)
        self.assertEqual(sum(s["bytes"] for s in servers), fetcher["bytes_read"])

    def test_kill_two_servers_mid_run_keeps_the_ids(self):
        gen = 1500
        expected = self.local_ids(gen)
        eps = self.start_servers()
        out_json = os.path.join(self.tmp, "kill.json")
        err_path = os.path.join(self.tmp, "kill.err")
        with open(err_path, "w") as err_file:
            p = subprocess.Popen(self.args(gen, eps, out_json), stdout=subprocess.PIPE, stderr=err_file, text=True)
            deadline = time.time() + TIMEOUT
            while "generating" not in read(err_path) and time.time() < deadline and p.poll() is None:
                time.sleep(0.05)
            for victim in (0, 1):
                time.sleep(1.0)
                self.assertIsNone(p.poll(), "the run ended before server %d was killed: raise gen" % victim)
                self.servers[victim].send_signal(signal.SIGKILL)
                self.servers[victim].wait(timeout=TIMEOUT)
            time.sleep(0.5)
            self.assertIsNone(p.poll(), "the run ended before it had to do without two servers: raise gen")
            rc, out, _, report = self.finish(p, out_json)
        err = read(err_path)
        self.assertEqual(rc, 0, err[-3000:])
        self.assertEqual([int(x) for x in out.split()], expected)
        servers = report["expert_servers"]
        self.assertTrue(servers[0]["dropped"] and servers[1]["dropped"], servers)
        self.assertFalse(servers[2]["dropped"], servers)
        self.assertGreater(servers[2]["experts"], 0, servers)
        for i in (0, 1):
            self.assertIn("expert server %s sent nothing for 2 s" % eps[i], err)
            self.assertIn("[launch] expert server %s:" % eps[i], err)
        # Reads in flight at a kill were read again elsewhere, not lost.
        self.assertEqual(sum(s["bytes"] for s in servers), report["service_stats"]["expert-fetcher"]["bytes_read"])

    def test_all_servers_gone_ends_the_run_naming_them(self):
        eps = self.start_servers()
        for p in self.servers:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=TIMEOUT)
        t0 = time.time()
        rc, out, err, _ = self.finish(subprocess.Popen(self.args(16, eps, os.path.join(self.tmp, "gone.json")),
                                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        self.assertEqual(rc, 1, err[-3000:])
        line = [l for l in err.splitlines() if "did not answer within 4 s" in l]
        self.assertTrue(line, err[-3000:])
        for ep in eps:
            self.assertIn(ep, line[-1])
        self.assertIn("dropped after 2 s of silence", line[-1])
        self.assertLess(time.time() - t0, 60)
        self.assertIn("expert server", last_line(err))

    def test_dry_run_plans_frames_per_server_and_the_slot_cap(self):
        def dry(*extra):
            return subprocess.run([os.path.join(BIN, "k3-launch"), self.toml, "--dry-run"] + list(extra) + self.extra,
                                  capture_output=True, text=True, timeout=TIMEOUT)

        def frames(r):
            self.assertEqual(r.returncode, 0, r.stderr)
            row = [l for l in r.stdout.splitlines() if " remote-frames " in l]
            self.assertEqual(len(row), 1, r.stdout)
            return row[0]

        def floor(*extra):  # "... below the floor of X (N bytes) ..."
            r = dry("--budget", "1", *extra)
            self.assertEqual(r.returncode, 6, r.stderr)
            return floor_bytes(r.stderr)

        one = ["--expert-server", "tcp://127.0.0.1:1"]
        three = one + ["--expert-server", "tcp://127.0.0.1:2", "--expert-server", "tcp://127.0.0.1:3"]
        self.assertIn("from 3 expert servers", frames(dry(*three)))
        self.assertIn("expert servers at tcp://127.0.0.1:1, tcp://127.0.0.1:2, tcp://127.0.0.1:3", dry(*three).stdout)
        base, f1, f3 = floor(), floor(*one), floor(*three)
        self.assertGreater(f1, base)
        self.assertEqual(f3 - base, 3 * (f1 - base), "the remote frames do not grow with the servers")
        # --inflight counts per server.
        self.assertEqual(floor(*three, "--inflight", "8") - base, 2 * (f3 - base))
        r = dry("--expert-slots", "5")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("expert slots 5 (capped by --expert-slots 5)", r.stdout)
        self.assertIn("experts %s" % "5 x", r.stdout)
        r = dry("--expert-slots", "1")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("--expert-slots 1 is below the 2 slots", r.stderr)


if __name__ == "__main__":
    require(BIN and os.path.isdir(MODEL), "K3_BIN / K3_TESTDATA not set")
    main()
