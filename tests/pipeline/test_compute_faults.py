"""Compute's faults of issue 12, with real processes on the tiny checkpoint.

- Fault 4: SIGINT to k3-launch during a long generation: compute stops at a safe point within
  1 s, sends its Stats and Done, and exits 5 (its exit status is read by strace attached to
  it, since only the launcher reaps it). Standalone k3-compute does the same on SIGINT, SIGTERM
  and SIGHUP, and still writes its --out report, marked interrupted.
- Fault 2: --threads outside 1..4 x online CPUs is refused with exit 2 naming the core count.
- Fault 6: another local client of the expert fetcher (expert_slot_hog) keeps every expert
  slot: compute fails within its slot wait with a message naming the cause, instead of
  waiting forever.
- Prefill progress: compute's control Stats carry prefill_tokens_done / _total.
Environment: K3_TESTDATA, K3_BIN, K3_SLOT_HOG (the expert_slot_hog binary).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import alive, children_of, env_for_ptrace, main, plan_floor, service_pid, shm_names, start_launch  # noqa: E402

BIN = os.environ.get("K3_BIN", "")
TESTDATA = os.environ.get("K3_TESTDATA", "")
MODEL = os.path.join(TESTDATA, "tiny")
HOG = os.environ.get("K3_SLOT_HOG", "")
IDS = "1,5,9,200,77,3,18,42"
TIMEOUT = 300


def cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return [a.decode() for a in f.read().split(b"\0") if a]


def flag_value(argv, flag):
    return argv[argv.index(flag) + 1]


class LineReader:
    """Collects a pipe's lines on a thread (so the child never blocks on a full pipe)."""

    def __init__(self, pipe):
        self.lines = []
        self.t = threading.Thread(target=self._run, args=(pipe,), daemon=True)
        self.t.start()

    def _run(self, pipe):
        with pipe:
            for line in pipe:
                self.lines.append(line)

    def text(self):
        self.t.join(timeout=10)
        return "".join(self.lines)

    def wait_for(self, pred, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if pred(self.lines):
                return True
            time.sleep(0.01)
        return False


class ExitWatch:
    """strace attached to `pid`: its exit status and when it exited (None without strace)."""

    def __init__(self, pid, tmp):
        self.out = os.path.join(tmp, "strace-%d.txt" % pid)
        self.p = None
        if shutil.which("strace"):
            self.p = subprocess.Popen(["strace", "-q", "-ttt", "-e", "trace=none", "-e", "signal=none",
                                       "-p", str(pid), "-o", self.out],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)  # attached

    def result(self):
        if not self.p:
            return None
        self.p.wait(timeout=30)
        with open(self.out) as f:
            for line in f:
                if "+++ exited with" in line:
                    return int(line.split("exited with")[1].split()[0]), float(line.split()[0])
                if "+++ killed by" in line:
                    return -1, float(line.split()[0])
        return None


class ComputeFaults(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not BIN or not os.path.isdir(MODEL):
            raise AssertionError("K3_BIN / K3_TESTDATA not set (tiny checkpoint from gate_testdata)")
        cls.tmp = tempfile.mkdtemp(prefix="k3-compute-faults-")
        cls.toml = os.path.join(cls.tmp, "tiny.toml")
        with open(cls.toml, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\nio = "pread"\nthreads = 1\n' % MODEL)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def launch(self, *extra, out=None, env=None):
        p = start_launch(self.toml, "--ids", IDS, *extra, out=out, env=env)
        return p, LineReader(p.stdout), LineReader(p.stderr)

    def assert_clean(self, p):
        self.assertEqual(children_of(p.pid), [])
        self.assertEqual(shm_names(p.pid), [])

    # ------------------------------------------------------------------ fault 4

    def test_sigint_to_launcher_stops_compute_within_1s_with_stats(self):
        p, out, err = self.launch("--gen", "100000", "--ignore-eos", env=env_for_ptrace())  # compute gets traced
        try:
            compute = service_pid(p.pid, "k3-compute")
            self.assertTrue(out.wait_for(lambda ls: len(ls) >= 5, 120), "no tokens: " + "".join(err.lines))
            watch = ExitWatch(compute, self.tmp)
            t_sig = time.time()
            p.send_signal(signal.SIGINT)
            while alive(compute) and time.time() < t_sig + 10:
                time.sleep(0.005)
            gone = time.time() - t_sig
            code = p.wait(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        stderr = err.text()
        self.assertLess(gone, 1.0, "compute still ran %.2f s after the SIGINT\n%s" % (gone, stderr))
        self.assertEqual(code, 5, stderr)
        self.assertIn("ended by interrupted", stderr)  # compute's stats line: Stats were sent
        status = watch.result()
        if status is not None:
            self.assertEqual(status[0], 5, "compute's exit status")
            self.assertLess(status[1] - t_sig, 1.0)
        self.assert_clean(p)

    def standalone_stop(self, sig):
        report = os.path.join(self.tmp, "standalone-%d.json" % sig)
        p = subprocess.Popen([os.path.join(BIN, "k3-compute"), "--standalone", MODEL, "--ids", IDS,
                              "--gen", "100000", "--ignore-eos", "--threads", "1", "--out", report],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = LineReader(p.stdout), LineReader(p.stderr)
        try:
            self.assertTrue(out.wait_for(lambda ls: len(ls) >= 5, 120), "no tokens: " + "".join(err.lines))
            t_sig = time.time()
            p.send_signal(sig)
            code = p.wait(timeout=10)
            took = time.time() - t_sig
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(code, 5, err.text())
        self.assertLess(took, 1.0)
        with open(report) as f:
            r = json.load(f)
        self.assertTrue(r["interrupted"])
        printed = [int(x) for x in out.text().split()]
        self.assertEqual(r["generated_ids"], printed)
        self.assertGreaterEqual(len(printed), 5)
        return printed

    def test_standalone_stops_at_a_safe_point_on_sigint_sigterm_sighup(self):
        prefixes = [self.standalone_stop(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
        # What was generated before the stop is the start of the same greedy sequence.
        shortest = min(len(x) for x in prefixes)
        for x in prefixes:
            self.assertEqual(x[:shortest], prefixes[0][:shortest])

    # ------------------------------------------------------------------ fault 2

    def test_threads_outside_the_core_bound_refused(self):
        cores = os.cpu_count()
        for n in ("100000", "20000", str(4 * cores + 1), "0"):
            with self.subTest(threads=n):
                r = subprocess.run([os.path.join(BIN, "k3-compute"), "--standalone", MODEL, "--ids", IDS,
                                    "--gen", "1", "--threads", n], capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertIn("%d online CPU cores" % cores, r.stderr)
        r = subprocess.run([os.path.join(BIN, "k3-compute"), "--standalone", MODEL, "--ids", IDS,
                            "--gen", "2", "--threads", str(4 * cores)], capture_output=True, text=True,
                           timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.stdout.split()), 2)

    # ------------------------------------------------------------------ fault 6

    def test_compute_gives_up_when_another_client_keeps_every_expert_slot(self):
        self.assertTrue(HOG and os.path.exists(HOG), "K3_SLOT_HOG not set")
        # The plan's floor: fewer expert slots than experts, so compute needs slots freed.
        p, out, err = self.launch("--gen", "100000", "--ignore-eos", "--budget", str(self.floor_budget()))
        hog = None
        try:
            fetcher = service_pid(p.pid, "k3-expert-fetcher")
            compute = service_pid(p.pid, "k3-compute")
            endpoint = flag_value(cmdline(fetcher), "--bind")
            self.assertTrue(out.wait_for(lambda ls: len(ls) >= 2, 120), "no tokens: " + "".join(err.lines))
            hog = subprocess.Popen([HOG, "--model", MODEL, "--endpoint", endpoint, "--seconds", "120"],
                                   stdout=subprocess.PIPE, text=True)
            t0 = time.time()
            # Compute's slot wait is 10 s; allow start-up of the hog and a few resends.
            code = p.wait(timeout=60)
            took = time.time() - t0
        finally:
            for proc in (p, hog):
                if proc and proc.poll() is None:
                    proc.kill()
                    proc.wait()
        stderr = err.text()
        self.assertNotEqual(code, 0, stderr)
        self.assertLess(took, 40, stderr)
        self.assertIn("k3-compute: expert fetcher: no free slot for layer", stderr)
        self.assertIn("another client of the fetcher is keeping them", stderr)
        self.assertFalse(alive(compute))
        self.assert_clean(p)

    def floor_budget(self):
        """The plan's floor (everything streams, fewest expert slots), as test_pipeline finds it."""
        return plan_floor(self.toml, timeout=60)

    # ------------------------------------------------------------------ prefill progress

    def test_prefill_progress_stats(self):
        ids = ",".join(str((i * 37 + 5) % 250) for i in range(300))
        toml = os.path.join(self.tmp, "chunk.toml")
        with open(toml, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\nio = "pread"\nthreads = 1\nprefill_chunk = 16\n' % MODEL)
        report = os.path.join(self.tmp, "progress.json")
        r = subprocess.run([os.path.join(BIN, "k3-launch"), toml, "--ids", ids, "--gen", "1", "--out", report],
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(report) as f:
            stats = json.load(f)["service_stats"]["compute"]
        self.assertEqual(stats.get("prefill_tokens_total"), 300, stats)
        self.assertEqual(stats.get("prefill_tokens_done"), 300, stats)


if __name__ == "__main__":
    main()
