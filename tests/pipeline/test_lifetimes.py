"""Lifetimes and signals of a pipeline run (issue 12, faults 5, 8 and 9; SIGHUP).

On the demo model (configs/demo.toml, with its tokenizer, so every service runs):

- kill -9 of the launcher mid-run: within a second no process of the run is left, no process
  holds (fd or mapping) an arena of the run, nothing of it is in /dev/shm and there is no
  /tmp/k3-run-<pid>;
- a /tmp/k3-run-<pid> made beforehand by someone else does not block a launch;
- a storm of signals that are not stop requests (SIGCHLD, SIGWINCH, SIGCONT, SIGURG, SIGUSR1,
  SIGUSR2; thousands, to the launcher and every service) never ends a run: exit 0 and the same
  text as a quiet run;
- SIGHUP is a stop request in every service binary: it exits 5;
- every write(2) to stderr is whole lines (strace -f), so lines of several processes never
  interleave mid-line, and every stderr line of many runs starts with a known prefix.

Environment: K3_BIN (directory with the binaries).
"""
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import (alive, children_of, env_for_ptrace, free_port, main, require, service_pid,  # noqa: E402
                       service_pids, start_launch)

BIN = os.environ.get("K3_BIN", "")
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DEMO = os.path.join(REPO, "configs", "demo.toml")
DEMO_MODEL = os.path.join(REPO, "models", "k3-demo-tiny")
PROMPT = "Once upon a time"
GEN = 24
TIMEOUT = 300
HARMLESS = [signal.SIGCHLD, signal.SIGWINCH, signal.SIGCONT, signal.SIGURG, signal.SIGUSR1, signal.SIGUSR2]
SERVICES = ("k3-trunk-reader", "k3-expert-fetcher", "k3-compute", "k3-tokenizer")


def memfd_arenas(pid):
    """{inode: (name, size)} of the k3 memfds `pid` holds as descriptors."""
    out = {}
    for fd in glob.glob("/proc/%d/fd/*" % pid):
        try:
            target = os.readlink(fd)
            if target.startswith("/memfd:k3-"):
                st = os.stat(fd)
                out[st.st_ino] = (target.replace(" (deleted)", ""), st.st_size)
        except OSError:
            pass
    return out


def holders(inodes):
    """Pids that still hold one of `inodes` (memfds) as a descriptor or a mapping."""
    found = set()
    for proc in glob.glob("/proc/[0-9]*"):
        pid = int(proc.split("/")[2])
        for fd in glob.glob(proc + "/fd/*"):
            try:
                if os.readlink(fd).startswith("/memfd:k3-") and os.stat(fd).st_ino in inodes:
                    found.add(pid)
            except OSError:
                pass
        try:
            with open(proc + "/maps") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 6 and "memfd:k3-" in parts[5] and int(parts[4]) in inodes:
                        found.add(pid)
        except (OSError, ValueError):
            pass
    return found


def listening(name):
    """True when an abstract unix socket "@..." of that name exists (/proc/net/unix)."""
    with open("/proc/net/unix") as f:
        return any(line.split()[-1] == name for line in f if len(line.split()) >= 8)


def connect_verdict(ep, uid):
    """Connects to abstract endpoint `ep` (as `uid` in a child when given) and reports what the
    server did: b"greeted" (sent its ZMTP greeting), b"closed" (hung up), or an error."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        verdict = b"error"
        try:
            os.close(r)
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect("\0" + ep[len("ipc://@"):])
            s.settimeout(5)
            try:
                verdict = b"greeted" if s.recv(100) else b"closed"
            except ConnectionResetError:
                verdict = b"closed"
        except BaseException as e:  # never let the forked child run the test suite
            verdict = repr(e).encode()
        finally:
            os.write(w, verdict)
            os._exit(0)
    os.close(w)
    os.waitpid(child, 0)
    verdict = os.read(r, 200)
    os.close(r)
    return verdict


def others_can_reach(path):
    """Whether every directory above `path` lets other users through (o+x)."""
    d = os.path.dirname(os.path.abspath(path))
    while True:
        if not os.stat(d).st_mode & 0o001:
            return False
        if d == "/":
            return True
        d = os.path.dirname(d)


def launch(extra=(), gen=GEN, **kw):
    return start_launch(DEMO, "--prompt", PROMPT, "--gen", gen, "--threads", "1", *extra, text=False, **kw)


def wait_all_services(launcher_pid, p, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        pids = service_pids(launcher_pid)
        if all(s in pids for s in SERVICES):
            return pids
        if p.poll() is not None:
            raise AssertionError("k3-launch ended before all services ran: %r" % p.stderr.read()[-2000:])
        time.sleep(0.01)
    raise AssertionError("not all services started")


class LifetimesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-lifetimes-")
        r = cls.run_demo()
        if r.returncode != 0:
            raise AssertionError("quiet demo run failed: " + r.stderr.decode(errors="replace")[-2000:])
        cls.quiet_text = r.stdout
        assert cls.quiet_text, "the quiet demo run printed no text"

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def run_demo(cls, extra=()):
        args = [os.path.join(BIN, "k3-launch"), DEMO, "--prompt", PROMPT, "--gen", str(GEN), "--threads", "1"]
        return subprocess.run(args + list(extra), capture_output=True, timeout=TIMEOUT)

    # ---- fault 5: nothing of a run outlives it ------------------------------------------------

    def test_kill9_of_launcher_leaves_nothing(self):
        p = launch(gen=4000)
        try:
            pids = wait_all_services(p.pid, p)
            # Every arena exists (filled) before the kill: wait (a little) until compute maps them.
            deadline = time.time() + 5
            arenas = {}
            while time.time() < deadline:
                arenas = memfd_arenas(p.pid)
                if len(arenas) >= 3 and holders(set(arenas)) >= {p.pid, pids["k3-compute"]}:
                    break
                if p.poll() is not None:
                    break
                time.sleep(0.05)
            time.sleep(0.3)  # well into generation
            self.assertIsNone(p.poll(), "the run ended before the kill")
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
            t_kill = time.time()
            deadline = t_kill + 1.0
            run = [p.pid] + list(pids.values())
            while time.time() < deadline and any(alive(x) for x in run):
                time.sleep(0.01)
            self.assertEqual([x for x in run if alive(x)], [], "processes of the run outlived it by 1 s")
            self.assertFalse(os.path.exists("/tmp/k3-run-%d" % p.pid), "run directory left behind")
            self.assertEqual(glob.glob("/dev/shm/k3-%d-*" % p.pid), [], "shared memory left in /dev/shm")
            self.assertGreaterEqual(len(arenas), 3, "the arenas are not memfds held by the launcher")
            self.assertEqual(holders(set(arenas)), set(), "an arena of the run is still held")
        finally:
            if p.poll() is None:
                p.kill()
            p.communicate()

    def test_normal_run_leaves_nothing(self):
        p = launch()
        arenas = {}
        while p.poll() is None:  # sample while it runs
            arenas.update(memfd_arenas(p.pid))
            time.sleep(0.02)
        out, err = p.communicate()
        self.assertEqual(p.returncode, 0, err[-2000:])
        self.assertEqual(out, self.quiet_text)
        self.assertFalse(os.path.exists("/tmp/k3-run-%d" % p.pid))
        self.assertEqual(glob.glob("/dev/shm/k3-%d-*" % p.pid), [])
        names = sorted(n for n, _ in arenas.values())
        self.assertTrue({"/memfd:k3-trunk-pinned", "/memfd:k3-experts", "/memfd:k3-trunk-ring"} <= set(names), names)
        self.assertEqual(holders(set(arenas)), set())

    def test_foreign_run_directory_does_not_block_a_launch(self):
        # The directory today's launcher would make, pre-created for the launcher's pid by
        # another user (as root: uid 65534 owns it and the launcher runs as uid 4242); without
        # root, one the launcher cannot empty. The other user needs to reach the build tree and
        # the demo model: a checkout under a 0700 directory (mktemp -d) takes the second way.
        root = os.geteuid() == 0 and others_can_reach(BIN) and others_can_reach(DEMO)
        made = []

        def before_exec():
            d = "/tmp/k3-run-%d" % os.getpid()
            os.mkdir(d, 0o700)
            os.mkdir(os.path.join(d, "control"))
            if root:
                os.chown(os.path.join(d, "control"), 65534, 65534)
                os.chown(d, 65534, 65534)
                os.setgroups([])
                os.setgid(4242)
                os.setuid(4242)
            else:
                os.chmod(d, 0o500)

        p = launch(preexec_fn=before_exec)
        made.append("/tmp/k3-run-%d" % p.pid)
        try:
            out, err = p.communicate(timeout=TIMEOUT)
            self.assertEqual(p.returncode, 0, err.decode(errors="replace")[-2000:])
            self.assertEqual(out, self.quiet_text)
        finally:
            for d in made:
                if os.path.isdir(d):
                    os.chmod(d, 0o700)
                    shutil.rmtree(d, ignore_errors=True)

    def test_endpoints_refuse_other_users(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to connect as another uid")
        p = launch(gen=4000)
        try:
            pids = wait_all_services(p.pid, p)
            argv = []
            while b"--bind" not in argv:  # right at exec the command line may not be there yet
                with open("/proc/%d/cmdline" % pids["k3-trunk-reader"], "rb") as f:
                    argv = f.read().split(b"\0")
            ep = argv[argv.index(b"--bind") + 1].decode()
            self.assertTrue(ep.startswith("ipc://@k3-%d-" % p.pid), ep)
            deadline = time.time() + 60
            while not listening(ep[len("ipc://"):]):
                self.assertLess(time.time(), deadline, "the trunk reader never bound " + ep)
                time.sleep(0.01)
            # Our own uid is greeted (ZMTP); another uid is hung up on at once.
            self.assertEqual(connect_verdict(ep, None), b"greeted")
            verdict = connect_verdict(ep, 4242)
            self.assertEqual(verdict, b"closed", "a connection from another uid was not refused")
        finally:
            p.kill()
            p.communicate()

    # ---- fault 8: harmless signals never end a run ---------------------------------------------

    def storm_run(self, sigs):
        p = launch(env=env_for_ptrace())
        # From the moment the launcher has spawned (its handlers are installed by then; a
        # signal before main() is any program's race). Services are covered from their fork.
        while not children_of(p.pid) and p.poll() is None:
            time.sleep(0.001)
        sent = [0]
        done = threading.Event()

        def storm():
            while not done.is_set() and p.poll() is None:
                targets = [p.pid] + children_of(p.pid)
                for _ in range(20):
                    for pid in targets:
                        for s in sigs:
                            try:
                                os.kill(pid, s)
                                sent[0] += 1
                            except OSError:
                                pass
                # Bounded rate (still tens of thousands of signals a run): flat out, a sanitizer
                # build on a busy machine spends all its time in signal handlers.
                time.sleep(0.005)

        t = threading.Thread(target=storm)
        t.start()
        try:
            out, err = p.communicate(timeout=TIMEOUT)
        finally:
            done.set()
            t.join()
        return p.returncode, out, err.decode(errors="replace"), sent[0]

    def test_signal_storm_never_ends_a_run(self):
        for i in range(4):
            code, out, err, sent = self.storm_run(HARMLESS)
            self.assertEqual(code, 0, "run %d under %d signals: %s" % (i, sent, err[-2000:]))
            self.assertEqual(out, self.quiet_text, "run %d: other text under signals" % i)
            self.assertGreater(sent, 2000, "the storm was too small to mean anything")
            self.assertNotIn("Interrupted system call", err)

    def test_storm_of_default_harmless_signals(self):
        # Signals whose default is to do nothing still interrupt the launcher's waits (it
        # catches SIGCHLD): before the fix about one run in five ended with exit 1 and
        # "zmq recv: Interrupted system call".
        for i in range(16):
            code, out, err, sent = self.storm_run([signal.SIGCHLD, signal.SIGWINCH, signal.SIGURG, signal.SIGCONT])
            self.assertEqual(code, 0, "run %d under %d signals: %s" % (i, sent, err[-2000:]))
            self.assertEqual(out, self.quiet_text, "run %d: other text under signals" % i)

    # ---- SIGHUP: a stop request in every service binary ---------------------------------------

    def test_sighup_stops_each_service_with_exit_5(self):
        p = launch(gen=4000)
        try:
            pids = wait_all_services(p.pid, p)
            time.sleep(0.5)
            for name in ("k3-tokenizer", "k3-trunk-reader", "k3-expert-fetcher"):
                os.kill(pids[name], signal.SIGHUP)
                time.sleep(0.3)
        finally:
            time.sleep(0.5)
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=TIMEOUT)
        err = err.decode(errors="replace")
        for svc in ("tokenizer", "trunk-reader", "expert-fetcher"):
            self.assertIn("%s exited with status 5" % svc, err)

    def test_every_process_is_named_after_its_binary(self):
        # What ps and top show (/proc/PID/comm, 15 characters at most): compute re-executes
        # itself once (services/compute/omp_policy.h) and was shown as "exe".
        p = launch(gen=4000)
        try:
            pids = wait_all_services(p.pid, p)
            time.sleep(0.5)  # past compute's re-exec
            for name, pid in pids.items():
                with open("/proc/%d/comm" % pid) as f:
                    self.assertEqual(f.read().strip(), name[:15], name)
        finally:
            p.send_signal(signal.SIGTERM)
            p.communicate(timeout=TIMEOUT)

    def test_the_api_key_reaches_k3_server_alone(self):
        # Other users can read /proc/PID/cmdline (ps); /proc/PID/environ only the owner. The
        # launcher overwrites the key in its argv once read and passes it to k3-server alone.
        key = "k3-test-key-%d" % os.getpid()
        p = start_launch(DEMO, "--serve", "127.0.0.1:%d" % free_port(), "--api-key", key, "--threads", "1",
                         text=False)
        try:
            wait_all_services(p.pid, p)
            service_pid(p.pid, "k3-server")
            time.sleep(0.5)  # every child past its exec (before it, a child shows k3-launch's exe)
            pids = service_pids(p.pid)
            self.assertEqual(sorted(pids), sorted(SERVICES + ("k3-server",)))
            with open("/proc/%d/cmdline" % p.pid, "rb") as f:
                self.assertNotIn(key.encode(), f.read())
            for name, pid in pids.items():
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    self.assertNotIn(key.encode(), f.read(), name)
                with open("/proc/%d/environ" % pid, "rb") as f:
                    env = f.read().split(b"\0")
                self.assertEqual(("K3_API_KEY=%s" % key).encode() in env, name == "k3-server", name)
        finally:
            p.send_signal(signal.SIGTERM)
            p.communicate(timeout=TIMEOUT)

    def test_sighup_stops_the_expert_server_with_exit_5(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        p = subprocess.Popen([os.path.join(BIN, "k3-expert-server"), "--model", DEMO_MODEL, "--bind",
                              "tcp://127.0.0.1:%d" % port], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.time() + 30
            err = b""
            while time.time() < deadline and p.poll() is None:
                with socket.socket() as c:
                    if c.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
            os.kill(p.pid, signal.SIGHUP)
            _, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        self.assertEqual(p.returncode, 5, err.decode(errors="replace")[-2000:])

    # ---- fault 9: one write per line ------------------------------------------------------------

    def test_every_stderr_write_is_whole_lines(self):
        if not shutil.which("strace"):
            self.skipTest("strace is not installed")
        if subprocess.run(["strace", "-o", "/dev/null", "true"], capture_output=True).returncode != 0:
            self.skipTest("strace cannot trace here (no ptrace permission)")
        trace = os.path.join(self.tmp, "strace.txt")
        args = ["strace", "-f", "-qq", "-e", "trace=write", "-e", "signal=none", "-xx", "-s", "1048576", "-o",
                trace, os.path.join(BIN, "k3-launch"), DEMO, "--prompt", PROMPT, "--gen", str(GEN),
                "--threads", "1"]
        r = subprocess.run(args, capture_output=True, timeout=TIMEOUT, env=env_for_ptrace())
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace")[-2000:])
        writes = []
        with open(trace) as f:
            for line in f:
                m = re.search(r'write\(2, "((?:\\x[0-9a-f]{2})*)"(\.\.\.)?,', line)
                if m:
                    writes.append(bytes.fromhex(m.group(1).replace("\\x", "")))
        self.assertGreater(len(writes), 10, "strace saw no stderr writes")
        partial = [w for w in writes if not w.endswith(b"\n")]
        self.assertEqual(partial, [], "writes to stderr that are not whole lines")

    def test_stderr_lines_of_many_runs_have_known_prefixes(self):
        for i in range(6):
            r = self.run_demo()
            self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace")[-2000:])
            lines = r.stderr.decode(errors="replace").splitlines()
            # The memory plan table comes first, before any service runs; from the first
            # service line on, every line is one process's.
            first = next(n for n, l in enumerate(lines) if l.startswith("["))
            bad = [l for l in lines[first:] if not (l.startswith("[") or l.startswith("k3-"))]
            self.assertEqual(bad, [], "run %d: stderr lines without a known prefix" % i)
            self.assertFalse(any(l.startswith("[[") for l in lines), "run %d: interleaved lines" % i)


if __name__ == "__main__":
    require(BIN and os.path.isdir(DEMO_MODEL), "K3_BIN not set or no demo model")
    main()
