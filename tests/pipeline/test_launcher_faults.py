"""k3-launch faults with real processes on the demo model (configs/demo.toml).

- --context that overflows the plan or exceeds max_position_embeddings, and --threads beyond
  4 x the online CPUs: exit 2 with one line.
- A service's failure is the run's exit code and its reason the launcher's last stderr line
  (`k3-launch: <service>: <reason>`): --dump-logits /dev/full (4), --dump-cache-trace /dev/full
  (4, written while the services stop), an expert server nobody answers (1, the server named).
- SIGINT / SIGTERM / SIGHUP during a long generation: stop within 2 s, exit 5, the summary and
  a report marked "interrupted". Output to a closed pipe (| head) ends quietly with exit 5.
- --stop-ids ends generation after one of the ids (compute obeys Generate.stop_ids); the report's
  finish_reason (compute's Done.reason) says length, stop or interrupted.
- In a real terminal (tmux): the generated text is intact next to the progress line, and
  --quiet leaves only the ids and the summary.
Every run checks that no /dev/shm/k3-* name and no child process is left behind.
Environment: K3_BIN (directory with the binaries).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import children_of, free_port, last_line, main, require, shm_names  # noqa: E402

BIN = os.environ.get("K3_BIN", "")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "configs", "demo.toml")
DEMO_MODEL = os.path.join(ROOT, "models", "k3-demo-tiny")
IDS = "1,5,9,200"
TIMEOUT = 300


def launch_cmd(*args):
    return [os.path.join(BIN, "k3-launch"), DEMO] + list(args)


class LauncherFaults(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-launcher-faults-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_launch(self, *args, timeout=TIMEOUT):
        p = subprocess.Popen(launch_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=timeout)
        self.assertEqual(shm_names(p.pid), [], "shared memory left behind")
        self.assertEqual(children_of(p.pid), [], "processes left behind")
        return p.returncode, out, err

    # ---- fault 1: --context ----
    def test_context_overflow_and_model_limit_are_usage_errors(self):
        for ctx in ("7205759403792794", "100000000", "1048577", "9223372036854775807"):
            with self.subTest(context=ctx):
                r = subprocess.run(launch_cmd("--context", ctx, "--dry-run"), capture_output=True, text=True,
                                   timeout=TIMEOUT)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
                self.assertIn("--context", r.stderr)
                self.assertNotIn("-", r.stdout.replace("--", ""), "a negative size was printed")
        r = subprocess.run(launch_cmd("--context", "1048576", "--dry-run"), capture_output=True, text=True,
                           timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)  # the model's own limit is accepted

    # ---- fault 2: --threads ----
    def test_threads_beyond_four_per_core_are_usage_errors(self):
        cores = os.sysconf("SC_NPROCESSORS_ONLN")
        for threads in ("100000", "20000", str(4 * cores + 1), "-1"):
            with self.subTest(threads=threads):
                r = subprocess.run(launch_cmd("--threads", threads, "--dry-run"), capture_output=True, text=True,
                                   timeout=TIMEOUT)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
                self.assertIn("%d online CPU cores" % cores, r.stderr)
        for threads in ("0", "1", str(4 * cores)):
            r = subprocess.run(launch_cmd("--threads", threads, "--dry-run"), capture_output=True, text=True,
                               timeout=TIMEOUT)
            self.assertEqual(r.returncode, 0, r.stderr)

    # ---- fault 3: exit code and last line ----
    def test_dump_logits_to_a_device_exits_4_before_the_run(self):
        # An output that is not a regular file is refused before any service starts
        # (common/user_file.h); a write that fails during the run is the cache-trace case below.
        rc, _, err = self.run_launch("--ids", IDS, "--gen", "4", "--dump-logits", "/dev/full")
        self.assertEqual(rc, 4, err[-2000:])
        self.assertEqual(last_line(err), "k3-launch: --dump-logits /dev/full: is a character device; not replaced")
        self.assertNotIn("ready", err)

    def test_dump_cache_trace_to_a_full_device_exits_4(self):
        # The fetcher writes its trace while stopping: that failure still counts.
        rc, _, err = self.run_launch("--ids", IDS, "--gen", "4", "--dump-cache-trace", "/dev/full")
        self.assertEqual(rc, 4, err[-2000:])
        self.assertTrue(last_line(err).startswith("k3-launch: expert-fetcher: "), err[-2000:])
        self.assertIn("/dev/full", last_line(err))

    def test_unreachable_expert_server_names_the_server(self):
        port = free_port()  # nobody listens there
        toml = os.path.join(self.tmp, "silent.toml")
        with open(toml, "w") as f:
            f.write('model = "%s"\nbudget = "2G"\ngen = 4\nexpert_server_timeout = 1.0\nno_verify = true\n' % DEMO_MODEL)
        p = subprocess.Popen([os.path.join(BIN, "k3-launch"), toml, "--ids", IDS, "--expert-server",
                              "tcp://127.0.0.1:%d" % port], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, err = p.communicate(timeout=TIMEOUT)
        self.assertEqual(p.returncode, 1, err[-2000:])
        last = last_line(err)
        self.assertTrue(last.startswith("k3-launch: "), last)
        self.assertIn("expert server tcp://127.0.0.1:%d did not answer within 1 s" % port, last)
        self.assertNotIn("exited with status", last)
        self.assertEqual(shm_names(p.pid), [])

    # ---- fault 4: requested stops ----
    def test_stop_signal_during_generation_exits_5_with_a_report(self):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            with self.subTest(signal=sig.name):
                out_json = os.path.join(self.tmp, "interrupted-%s.json" % sig.name)
                p = subprocess.Popen(launch_cmd("--ids", IDS, "--gen", "100000", "--ignore-eos", "--out", out_json),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(3):  # generation is under way
                    self.assertTrue(p.stdout.readline().strip().isdigit())
                t0 = time.time()
                p.send_signal(sig)
                out, err = p.communicate(timeout=TIMEOUT)
                took = time.time() - t0
                self.assertEqual(p.returncode, 5, err[-2000:])
                self.assertLess(took, 2.0, "stopping took %.2f s" % took)
                self.assertEqual(last_line(err), "k3-launch: interrupted by %s; services stopped" % sig.name)
                self.assertIn("(interrupted)", err)  # the summary
                with open(out_json) as f:
                    report = json.load(f)
                self.assertTrue(report["interrupted"])
                self.assertEqual(report["stop_reason"], "interrupted by " + sig.name)
                # compute's Done came and says why it ended (Done.reason)
                self.assertEqual(report["finish_reason"], "interrupted")
                self.assertIn("(ended: interrupted)", err)
                self.assertGreaterEqual(len(report["generated_ids"]), 3)
                self.assertGreater(report["service_stats"]["trunk-reader"]["bytes_read"], 0)
                self.assertIn("hits", report["service_stats"]["expert-fetcher"])
                self.assertEqual(shm_names(p.pid), [])
                self.assertEqual(children_of(p.pid), [])

    def test_closed_stdout_ends_quietly(self):
        # `k3-launch ... | head -2`: the reader goes away after two ids.
        out_json = os.path.join(self.tmp, "head.json")
        p = subprocess.Popen(launch_cmd("--ids", IDS, "--gen", "200", "--ignore-eos", "--out", out_json), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        lines = [p.stdout.readline(), p.stdout.readline()]
        self.assertTrue(all(l.strip().isdigit() for l in lines), lines)
        p.stdout.close()
        t0 = time.time()
        err = p.stderr.read()
        p.wait(timeout=TIMEOUT)
        self.assertEqual(p.returncode, 5, err[-2000:])
        self.assertLess(time.time() - t0, 5)
        for line in err.splitlines():
            self.assertFalse(line.startswith("k3-launch:"), line)
            self.assertNotIn("Broken pipe", line)
        with open(out_json) as f:
            report = json.load(f)
        self.assertTrue(report["interrupted"])
        self.assertEqual(report["stop_reason"], "stdout closed")
        self.assertEqual(shm_names(p.pid), [])
        self.assertEqual(children_of(p.pid), [])

    # ---- --stop-ids ----
    def test_stop_ids_end_generation(self):
        out_json = os.path.join(self.tmp, "no-stop.json")
        rc, out, err = self.run_launch("--ids", IDS, "--gen", "12", "--out", out_json)
        self.assertEqual(rc, 0, err[-2000:])
        self.assertIn("12 tokens (ended: length)", err)
        with open(out_json) as f:
            self.assertEqual(json.load(f)["finish_reason"], "length")
        full = [int(x) for x in out.split()]
        self.assertEqual(len(full), 12)
        stop = full[4]
        expect = full[:full.index(stop) + 1]
        out_json = os.path.join(self.tmp, "stop.json")
        rc, out, err = self.run_launch("--ids", IDS, "--gen", "12", "--stop-ids", "%d,4351" % stop, "--out", out_json)
        self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual([int(x) for x in out.split()], expect)
        self.assertIn("%d tokens (ended: stop)" % len(expect), err)
        with open(out_json) as f:
            self.assertEqual(json.load(f)["finish_reason"], "stop")
        toml = os.path.join(self.tmp, "stop.toml")
        with open(toml, "w") as f:
            f.write('model = "%s"\nbudget = "2G"\ngen = 12\nstop_ids = [%d]\n' % (DEMO_MODEL, stop))
        p = subprocess.run([os.path.join(BIN, "k3-launch"), toml, "--ids", IDS], capture_output=True, text=True,
                           timeout=TIMEOUT)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertEqual([int(x) for x in p.stdout.split()], expect)
        r = subprocess.run(launch_cmd("--ids", IDS, "--stop-ids", "99999999"), capture_output=True, text=True,
                           timeout=TIMEOUT)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--stop-ids", r.stderr)


@unittest.skipUnless(shutil.which("tmux"), "tmux is not installed")
class LauncherInATerminal(unittest.TestCase):
    """A run in a real terminal (a tmux pane on its own server socket)."""

    @classmethod
    def setUpClass(cls):
        cls.runs = 0

    def tmux(self, *args):
        return subprocess.run(["tmux", "-L", self.sock] + list(args), capture_output=True, text=True, timeout=60)

    def run_in_terminal(self, args):
        """Runs k3-launch with stdout and stderr on the pane's terminal; returns the screen."""
        # A tmux server of its own for each run (a killed server may still hold its socket).
        LauncherInATerminal.runs += 1
        self.sock = "k3-launcher-test-%d-%d" % (os.getpid(), self.runs)
        done = os.path.join(tempfile.mkdtemp(prefix="k3-tmux-"), "rc")
        cmd = " ".join("'%s'" % a for a in launch_cmd(*args)) + "; echo $? > " + done
        r = self.tmux("new-session", "-d", "-s", "t", "-x", "250", "-y", "200", cmd + "; sleep 60")
        self.assertEqual(r.returncode, 0, r.stderr)
        try:
            deadline = time.time() + TIMEOUT
            while not os.path.exists(done) and time.time() < deadline:
                time.sleep(0.2)
            time.sleep(0.3)
            with open(done) as f:
                rc = int(f.read())
            screen = self.tmux("capture-pane", "-p", "-J", "-t", "t", "-S", "-2000").stdout
        finally:
            self.tmux("kill-server")
            shutil.rmtree(os.path.dirname(done), ignore_errors=True)
        return rc, screen

    def test_text_intact_and_progress_line(self):
        # The same greedy run without a terminal gives the reference text.
        ref = subprocess.run(launch_cmd("--prompt", "Once upon a time", "--gen", "30"), capture_output=True,
                             text=True, timeout=TIMEOUT)
        self.assertEqual(ref.returncode, 0, ref.stderr[-2000:])
        rc, screen = self.run_in_terminal(["--prompt", "Once upon a time", "--gen", "30"])
        self.assertEqual(rc, 0, screen)
        self.assertIn("[launch] pinning trunk: ", screen)
        self.assertRegex(screen, r"\[launch\] pinning trunk: .* 100%")
        # Every line of the generated text appears on the screen, whole and in order.
        pos = 0
        for line in ref.stdout.expandtabs().splitlines():
            if not line.strip():
                continue
            at = screen.find(line.rstrip(), pos)
            self.assertGreaterEqual(at, 0, "generated line %r broken on the terminal:\n%s" % (line, screen))
            pos = at + len(line.rstrip())
        self.assertIn("[launch] peak total", screen[pos:])

    def test_ids_intact_and_quiet_keeps_only_the_summary(self):
        rc, screen = self.run_in_terminal(["--ids", IDS, "--gen", "20"])
        self.assertEqual(rc, 0, screen)
        ids = [l for l in screen.splitlines() if l.strip().isdigit()]
        self.assertEqual(len(ids), 20, screen)
        self.assertIn("[launch] compute ready", screen)
        rc, screen = self.run_in_terminal(["--ids", IDS, "--gen", "20", "--quiet"])
        self.assertEqual(rc, 0, screen)
        lines = [l for l in screen.splitlines() if l.strip()]
        self.assertEqual([l for l in lines if l.strip().isdigit()], ids)
        others = [l for l in lines if not l.strip().isdigit()]
        self.assertTrue(others and all(l.startswith("[launch] ") for l in others), screen)
        self.assertTrue(any(l.startswith("[launch] peak total") for l in others), screen)
        for word in ("ready", "pinning", "memory plan", "[trunk-reader]", "[compute]", "stats:"):
            self.assertNotIn(word, screen)


if __name__ == "__main__":
    require(BIN and os.path.isdir(DEMO_MODEL), "K3_BIN not set or the demo model is missing")
    main()
