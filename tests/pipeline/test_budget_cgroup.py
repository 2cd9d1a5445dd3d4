"""The budget is a promise: k3-launch under a hard cgroup-v1 memory limit equal to --budget.

A generated checkpoint with a large vocabulary (lm_head bigger than a ring slot, so it streams
in several chunks) is run at the plan's floor (embedding rows and lm_head streamed), at the
lower floor of the smallest trunk pieces (`--trunk-piece 4096`: every streamed layer in
pieces, docs/trunk-pieces.md) and at a budget that keeps everything resident. For each run:

- the launcher and everything it spawns live in a fresh memory cgroup whose hard limit is the
  budget (the wrapper shell joins the cgroup, then execs k3-launch); the run must succeed with
  no OOM kill, and memory.max_usage_in_bytes must stay within the limit;
- separately, the total is sampled while it runs: private memory of every process in the
  cgroup (VmRSS - RssShmem) plus the full size of every arena of the run (the memfds the
  launcher holds, found through /proc/PID/fd); its peak must stay within the budget;
- the generated ids equal standalone k3-compute's, and the logits that choose the first token
  are bit-identical to standalone's (streamed or resident: same bytes, same dot products).

In serve mode (`--serve`, the bundled demo model and its tokenizer) k3-launch runs at the serving
floor inside the cap while every connection thread of k3-server carries a request at once (real
HTTP, streamed and not, each body padded to max_body_bytes with an ignored field): at least
queue_size of them must be answered 200, the rest 200 or 429; no OOM kill, the cgroup's and the
sampled peak within the budget, and k3-server's own peak within its share of the plan (its
regions plus one process overhead).

Exit code 77 (ctest SKIP_RETURN_CODE) when the cgroup-v1 memory controller is missing or not
writable. Environment: K3_BIN (binaries), K3_PYTHON (the numpy python, for the generator).
"""
import glob
import http.client
import json
import os
import signal
import socket
import threading
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import floor_bytes, main, require  # noqa: E402

BIN = os.environ.get("K3_BIN", "")
HERE = os.path.dirname(os.path.abspath(__file__))
GENERATOR = os.path.join(HERE, "..", "generator", "make_checkpoint.py")
DEMO = os.path.join(HERE, "..", "..", "models", "k3-demo-tiny")
PYTHON = os.environ.get("K3_PYTHON", "/usr/bin/python3")
CGROOT = "/sys/fs/cgroup/memory"
IDS = "1,5,9,8000,77,3,4095,42"
GEN = 5
TIMEOUT = 300


def cgroup_unavailable():
    """A reason string when a memory cgroup cannot be made here, else None."""
    if not os.path.isfile(os.path.join(CGROOT, "memory.limit_in_bytes")):
        return "no cgroup-v1 memory controller at " + CGROOT
    probe = os.path.join(CGROOT, "k3-test-probe-%d" % os.getpid())
    try:
        os.mkdir(probe)
        with open(os.path.join(probe, "memory.limit_in_bytes"), "w") as f:
            f.write(str(64 << 20))
    except OSError as e:
        return "cannot create a memory cgroup under %s: %s" % (CGROOT, e)
    finally:
        try:
            os.rmdir(probe)
        except OSError:
            pass
    return None


class MemoryCgroup:
    """A fresh memory cgroup with a hard limit; removed on exit."""

    def __init__(self, limit):
        self.path = os.path.join(CGROOT, "k3-test-%d-%d" % (os.getpid(), int(time.time() * 1000)))
        self.limit = limit

    def __enter__(self):
        os.mkdir(self.path)
        self.write("memory.limit_in_bytes", str(self.limit))
        # No swap escape hatch where the kernel offers the knob.
        if os.path.exists(os.path.join(self.path, "memory.memsw.limit_in_bytes")):
            try:
                self.write("memory.memsw.limit_in_bytes", str(self.limit))
            except OSError:
                pass
        return self

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def pids(self):
        try:
            return [int(x) for x in self.read("cgroup.procs").split()]
        except OSError:
            return []

    def oom_kills(self):
        for line in self.read("memory.oom_control").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def __exit__(self, *exc):
        deadline = time.time() + 10
        while self.pids() and time.time() < deadline:
            time.sleep(0.05)
        try:
            os.rmdir(self.path)
        except OSError:
            pass
        return False


def private_bytes(pid):
    """VmRSS - RssShmem of one process (0 if it is gone)."""
    rss = shmem = 0
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("RssShmem:"):
                    shmem = int(line.split()[1]) * 1024
    except OSError:
        return 0
    return max(0, rss - shmem)


def shm_bytes(launcher_pid):
    """Full size of every arena of the run: the launcher holds each one as a memfd
    ("/memfd:k3-<region>" in /proc/PID/fd) for as long as the run lasts."""
    total = 0
    for fd in glob.glob("/proc/%d/fd/*" % launcher_pid):
        try:
            if os.readlink(fd).startswith("/memfd:k3-"):
                total += os.stat(fd).st_size
        except OSError:
            pass
    return total


def status_bytes(pid, key):
    """One "kB" field of /proc/PID/status in bytes (0 if the process is gone)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def exe_name(pid):
    try:
        return os.path.basename(os.readlink("/proc/%d/exe" % pid))
    except OSError:
        return ""


def table_bytes(text):
    """A size as the plan table prints it ("12.5 MiB", "1.25 GiB", "4096 B")."""
    value, unit = text.split()
    return int(float(value) * {"B": 1, "MiB": 1 << 20, "GiB": 1 << 30}[unit])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BudgetCgroupTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-cgroup-test-")
        cls.model = os.path.join(cls.tmp, "ck")
        subprocess.run([PYTHON, GENERATOR, cls.model, "--preset", "tiny", "--layers", "13", "--experts", "64",
                        "--vocab", "8192"], check=True, capture_output=True, timeout=TIMEOUT)
        cls.toml = os.path.join(cls.tmp, "ck.toml")
        with open(cls.toml, "w") as f:
            f.write('model = "%s"\nio = "pread"\ngen = %d\nthreads = 1\n' % (cls.model, GEN))
        cls.sa_logits = os.path.join(cls.tmp, "standalone.f32")
        r = subprocess.run([os.path.join(BIN, "k3-compute"), "--standalone", cls.model, "--ids", IDS, "--gen",
                            str(GEN), "--threads", "1", "--dump-logits", cls.sa_logits],
                           capture_output=True, text=True, timeout=TIMEOUT)
        if r.returncode != 0:
            raise AssertionError("standalone k3-compute failed: " + r.stderr)
        cls.expected = [int(x) for x in r.stdout.split()]
        r = cls.dry_run(1)
        assert r.returncode == 6, r.stderr
        cls.floor = floor_bytes(r.stderr)

    @classmethod
    def dry_run(cls, budget):
        return subprocess.run([os.path.join(BIN, "k3-launch"), cls.toml, "--budget", str(budget), "--dry-run"],
                              capture_output=True, text=True, timeout=TIMEOUT)

    def plan(self, budget):
        r = self.dry_run(budget)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def run_limited(self, budget, extra=()):
        """k3-launch in a memory cgroup limited to `budget`; returns (ids, logits, usage, peak)."""
        logits = os.path.join(self.tmp, "logits-%d.f32" % budget)
        launch = [os.path.join(BIN, "k3-launch"), self.toml, "--budget", str(budget), "--ids", IDS,
                  "--dump-logits", logits] + list(extra)
        with MemoryCgroup(budget) as cg:
            # Only the launcher (and what it spawns) joins the cgroup, before exec.
            wrapper = 'echo $$ > "$0"/cgroup.procs && exec "$@"'
            p = subprocess.Popen(["sh", "-c", wrapper, cg.path] + launch, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            peak = arenas = 0
            deadline = time.time() + TIMEOUT
            while p.poll() is None and time.time() < deadline:
                shm = shm_bytes(p.pid)
                arenas = max(arenas, shm)
                total = sum(private_bytes(pid) for pid in cg.pids()) + shm
                peak = max(peak, total)
                time.sleep(0.02)
            if p.poll() is None:
                p.kill()
            out, err = p.communicate()
            usage = int(cg.read("memory.max_usage_in_bytes"))
            oom = cg.oom_kills()
        self.assertEqual(oom, 0, "OOM kill inside the budget: " + err[-2000:])
        self.assertEqual(p.returncode, 0, err[-3000:])
        self.assertGreater(arenas, 0, "no arena of the run was found to count")
        with open(logits, "rb") as f:
            data = f.read()
        return [int(x) for x in out.split()], data, usage, peak, err

    def check(self, budget, expect_streamed):
        plan = self.plan(budget)
        streamed = [l for l in plan.splitlines() if l.startswith("streamed:")][0]
        if expect_streamed:
            self.assertIn("rows via embed-window", streamed)
            chunks = int(streamed.split("in ")[1].split(" chunks")[0])
            self.assertGreater(chunks, 1, "lm_head should need several ring chunks: " + streamed)
        else:
            self.assertEqual(streamed, "streamed: embedding no (resident), lm_head no (resident)")
        ids, logits, usage, peak, err = self.run_limited(budget)
        self.assertEqual(ids, self.expected, err[-2000:])
        with open(self.sa_logits, "rb") as f:
            self.assertEqual(logits, f.read(), "logits differ from standalone (streamed=%s)" % expect_streamed)
        self.assertLessEqual(usage, budget)
        self.assertGreater(peak, 0)
        self.assertLessEqual(peak, budget, "private memory + shm arenas exceeded the budget")
        sys.stderr.write("budget %d: cgroup max usage %d, sampled peak %d\n" % (budget, usage, peak))

    def test_floor_streams_and_fits(self):
        self.check(self.floor, True)

    def test_pieced_floor_fits(self):
        # Ring slots of the smallest piece (docs/trunk-pieces.md): the floor is lower, every
        # streamed layer arrives in pieces, and the run fits a hard cap equal to that floor.
        flag = ["--trunk-piece", "4096"]
        r = subprocess.run([os.path.join(BIN, "k3-launch"), self.toml, "--budget", "1", "--dry-run"] + flag,
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 6, r.stderr)
        floor = floor_bytes(r.stderr)
        self.assertLess(floor, self.floor)
        plan = subprocess.run([os.path.join(BIN, "k3-launch"), self.toml, "--budget", str(floor), "--dry-run"] + flag,
                              capture_output=True, text=True, timeout=TIMEOUT).stdout
        self.assertIn("layers in pieces", plan)
        ids, logits, usage, peak, err = self.run_limited(floor, flag)
        self.assertEqual(ids, self.expected, err[-2000:])
        with open(self.sa_logits, "rb") as f:
            self.assertEqual(logits, f.read(), "logits differ from standalone (pieces)")
        self.assertLessEqual(usage, floor)
        self.assertLessEqual(peak, floor, "private memory + shm arenas exceeded the budget")
        sys.stderr.write("pieced floor %d (whole-layer floor %d): cgroup max usage %d, sampled peak %d\n"
                         % (floor, self.floor, usage, peak))

    def test_resident_fits(self):
        budget = self.floor
        while "embedding no (resident), lm_head no (resident)" not in self.plan(budget):
            budget *= 2
            self.assertLess(budget, 1 << 40)
        self.check(budget, False)


class ServeBudgetCgroupTest(unittest.TestCase):
    """k3-launch --serve at the serving floor inside a hard cap, every connection thread busy."""

    MAX_BATCH, QUEUE = 2, 4
    HTTP_THREADS = MAX_BATCH + QUEUE + 4  # k3-launch's default (docs/server.md)
    MAX_BODY = 1 << 20
    CONTEXT = 256

    @classmethod
    def setUpClass(cls):
        if not BIN:
            raise AssertionError("K3_BIN not set")
        cls.tmp = tempfile.mkdtemp(prefix="k3-cgroup-serve-")
        cls.toml = os.path.join(cls.tmp, "serve.toml")
        with open(cls.toml, "w") as f:
            f.write('model = "%s"\ntokenizer = "%s"\nio = "pread"\ncontext = %d\nthreads = 1\n'
                    % (DEMO, DEMO, cls.CONTEXT))

    def launch_args(self, port):
        return [os.path.join(BIN, "k3-launch"), self.toml, "--serve", "127.0.0.1:%d" % port, "--max-batch",
                str(self.MAX_BATCH), "--queue-size", str(self.QUEUE), "--max-body-bytes", str(self.MAX_BODY)]

    def floor_and_plan(self):
        r = subprocess.run(self.launch_args(1) + ["--budget", "1", "--dry-run"], capture_output=True, text=True,
                           timeout=TIMEOUT)
        self.assertEqual(r.returncode, 6, r.stderr)
        floor = int(r.stderr.split("(")[1].split(" bytes")[0])
        r = subprocess.run(self.launch_args(1) + ["--budget", str(floor), "--dry-run"], capture_output=True,
                           text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        return floor, r.stdout

    def request_body(self, i):
        """A valid completion request padded to MAX_BODY with an ignored field of small ids."""
        head = json.dumps({"model": "k3-demo-tiny", "prompt": [1 + i, 2, 3], "max_tokens": 24, "ignore_eos": True,
                           "stream": i % 2 == 0})[:-1] + ', "pad": ['
        n = (self.MAX_BODY - len(head) - 8) // 2
        return (head + ",".join(["0"] * n) + "]}").encode()

    def test_serve_floor_under_load(self):
        floor, plan = self.floor_and_plan()
        server_rows = [l for l in plan.splitlines() if l.startswith("server ")]
        self.assertTrue(server_rows, "the serving plan has no k3-server share:\n" + plan)
        overhead = [l for l in plan.splitlines() if "process-overhead" in l][0]
        self.assertIn("6 processes", overhead)
        per_process = table_bytes(" ".join(overhead.split()[2:4])) // 6
        server_share = sum(table_bytes(" ".join(l.split()[2:4])) for l in server_rows) + per_process
        port = free_port()
        base = "127.0.0.1"
        with MemoryCgroup(floor) as cg:
            wrapper = 'echo $$ > "$0"/cgroup.procs && exec "$@"'
            err_path = os.path.join(self.tmp, "serve.err")
            with open(err_path, "wb") as err:
                p = subprocess.Popen(["sh", "-c", wrapper, cg.path] + self.launch_args(port) + ["--budget", str(floor)],
                                     stdout=subprocess.DEVNULL, stderr=err)
            stop = threading.Event()
            peak = [0, 0]  # sampled total, k3-server's VmHWM

            def sample():
                while not stop.is_set() and p.poll() is None:
                    pids = cg.pids()
                    peak[0] = max(peak[0], sum(private_bytes(q) for q in pids) + shm_bytes(p.pid))
                    for q in pids:
                        if exe_name(q) == "k3-server":
                            peak[1] = max(peak[1], status_bytes(q, "VmHWM") - status_bytes(q, "RssShmem"))
                    time.sleep(0.02)

            sampler = threading.Thread(target=sample)
            sampler.start()
            try:
                deadline = time.time() + 120
                while True:
                    self.assertIsNone(p.poll(), "k3-launch --serve exited %s at the floor" % p.returncode)
                    try:
                        c = http.client.HTTPConnection(base, port, timeout=2)
                        c.request("GET", "/health")
                        if c.getresponse().status == 200:
                            break
                    except OSError:
                        pass
                    self.assertLess(time.time(), deadline, "no /health 200 within 120 s")
                    time.sleep(0.1)
                bodies = [self.request_body(i) for i in range(self.HTTP_THREADS)]
                answers = [None] * len(bodies)

                def one(i):
                    c = http.client.HTTPConnection(base, port, timeout=TIMEOUT)
                    try:
                        c.request("POST", "/v1/completions", body=bodies[i], headers={"Content-Type": "application/json"})
                        r = c.getresponse()
                        answers[i] = (r.status, r.read())
                    except OSError as e:
                        answers[i] = (None, str(e).encode())
                    finally:
                        c.close()

                clients = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
                for t in clients:
                    t.start()
                for t in clients:
                    t.join()
                self.assertIsNone(p.poll(), "k3-launch --serve died under load")
            finally:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
                    try:
                        p.wait(timeout=60)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
                stop.set()
                sampler.join()
                usage = int(cg.read("memory.max_usage_in_bytes"))
                oom = cg.oom_kills()
            with open(err_path, "rb") as f:
                err_text = f.read().decode("utf-8", "replace")
        self.assertEqual(oom, 0, "OOM kill inside the serving budget: " + err_text[-2000:])
        codes = [a[0] for a in answers]
        self.assertTrue(all(c in (200, 429) for c in codes), "answers %s: %s" % (codes, err_text[-2000:]))
        # Requests arriving at once all wait for their prompt's encoding, which counts against the
        # queue, so at least queue_size of them get in; the others may find the queue full.
        self.assertGreaterEqual(codes.count(200), self.QUEUE, codes)
        self.assertIn(p.returncode, (0, 5), "k3-launch after SIGINT: " + err_text[-2000:])
        for (code, data), i in zip(answers, range(len(answers))):
            if code == 200 and i % 2 == 1:
                self.assertEqual(len(json.loads(data)["choices"][0]["text"]) > 0, True)
            elif code == 200:
                self.assertIn(b"data: [DONE]", data)
        self.assertLessEqual(usage, floor)
        self.assertGreater(peak[1], 0, "k3-server was never sampled")
        self.assertLessEqual(peak[0], floor, "private memory + shm arenas exceeded the budget")
        self.assertLessEqual(peak[1], server_share, "k3-server's peak is over its share of the plan")
        sys.stderr.write("serve floor %d: cgroup max usage %d, sampled peak %d; k3-server peak %d of its share %d; "
                         "answers %s\n" % (floor, usage, peak[0], peak[1], server_share, codes))


if __name__ == "__main__":
    reason = cgroup_unavailable()
    if os.environ.get("K3_SANITIZED") == "1":
        # ASan's shadow memory and quarantine are not part of the engine's plan.
        reason = "sanitizer build: memory use is not the engine's"
    require(not reason, reason)
    require(BIN, "K3_BIN not set")
    main()
