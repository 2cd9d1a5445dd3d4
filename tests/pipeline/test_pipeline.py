"""Pipeline tests: k3-launch driving the real services on the tiny checkpoint.

The reference is the standalone k3-compute (mmap, same forward pass); the launched pipeline
must produce exactly its ids at budgets that stream everything, stream half and pin
everything, with every read backend, and also when a weight service is killed mid-run.
Every test checks that no /dev/shm/k3-* name and no child process is left behind.
Environment: K3_TESTDATA (fixture dir), K3_BIN (directory with the binaries).
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import children_of, floor_bytes, main, plan_floor, require, service_pid, shm_names, start_launch  # noqa: E402

BIN = os.environ.get("K3_BIN", "")
TESTDATA = os.environ.get("K3_TESTDATA", "")
MODEL = os.path.join(TESTDATA, "tiny")
IDS = "1,5,9,200,77,3,18,42"
GEN = 6
TIMEOUT = 300


class PipelineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-pipe-test-")
        cls.toml = os.path.join(cls.tmp, "tiny.toml")
        with open(cls.toml, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\nio = "pread"\ngen = %d\nthreads = 1\n' % (MODEL, GEN))
        r = subprocess.run([os.path.join(BIN, "k3-compute"), "--standalone", MODEL, "--ids", IDS,
                            "--gen", str(GEN), "--threads", "1"],
                           capture_output=True, text=True, timeout=TIMEOUT)
        if r.returncode != 0:
            raise AssertionError("standalone k3-compute failed: " + r.stderr)
        cls.expected = [int(x) for x in r.stdout.split()]
        assert len(cls.expected) == GEN
        # Budgets from the plan itself: its floor (everything streams), the budget where every
        # layer is pinned, and one in between.
        cls.floor = cls.plan_floor()
        cls.budgets = cls.find_budgets()

    @classmethod
    def dry_run(cls, budget):
        r = subprocess.run([os.path.join(BIN, "k3-launch"), cls.toml, "--budget", str(budget), "--dry-run"],
                           capture_output=True, text=True, timeout=TIMEOUT)
        return r

    @classmethod
    def plan_floor(cls):
        return plan_floor(cls.toml, timeout=TIMEOUT)

    @classmethod
    def pinned_count(cls, budget):
        r = cls.dry_run(budget)
        assert r.returncode == 0, r.stderr
        line = [l for l in r.stdout.splitlines() if l.startswith("pinned layers:")][0]
        n, of = line.split(":")[1].split(";")[0].split(" of ")
        return int(n), int(of)

    @classmethod
    def find_budgets(cls):
        lo = cls.floor
        n_lo, total = cls.pinned_count(lo)
        hi = lo
        while cls.pinned_count(hi)[0] < total:
            hi *= 2
        # bisect for a budget that pins some but not all layers
        a, b = lo, hi
        mid = None
        for _ in range(40):
            m = (a + b) // 2
            n, _ = cls.pinned_count(m)
            if 0 < n < total:
                mid = m
                break
            if n == 0:
                a = m
            else:
                b = m
        return {"stream": lo, "middle": mid, "pinned": hi, "n_lo": n_lo, "total": total}

    def launch(self, budget, io="pread", extra=(), out=None):
        return start_launch(self.toml, "--budget", budget, "--io", io, "--ids", IDS, *extra, out=out)

    def finish(self, p):
        try:
            out, err = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            self.fail("k3-launch timed out: " + err[-2000:])
        return out, err

    def assertClean(self, pid):
        self.assertEqual(shm_names(pid), [], "shared memory left behind")
        self.assertEqual(children_of(pid), [], "processes left behind")
        self.assertFalse(os.path.exists("/tmp/k3-run-%d" % pid), "run directory left behind")

    def run_and_compare(self, budget, io="pread"):
        out_json = os.path.join(self.tmp, "report-%s-%s.json" % (budget, io))
        p = self.launch(budget, io, out=out_json)
        out, err = self.finish(p)
        self.assertClean(p.pid)
        self.assertEqual(p.returncode, 0, err[-3000:])
        ids = [int(x) for x in out.split()]
        self.assertEqual(ids, self.expected, err[-3000:])
        with open(out_json) as f:
            rep = json.load(f)
        self.assertEqual(rep["generated_ids"], self.expected)
        self.assertEqual(rep["prompt_ids"], [int(x) for x in IDS.split(",")])
        self.assertEqual(rep["expert_inputs"], "f32")  # the default
        for key in ("seconds_per_token", "trunk_bytes_per_token", "expert_bytes_per_token",
                    "expert_hit_rate", "io_share", "peak_memory", "peak_memory_total_bytes"):
            self.assertIn(key, rep)
        # A share of the run: waits before the request (start-up) are not counted.
        self.assertGreaterEqual(rep["io_share"], 0.0)
        self.assertLessEqual(rep["io_share"], 1.0)
        steps = rep["token_seconds"]
        self.assertEqual(len(steps), len(self.expected) - 1)
        self.assertTrue(all(s > 0 for s in steps))
        self.assertAlmostEqual(rep["median_token_seconds"], statistics.median(steps))
        for svc in ("compute", "trunk-reader", "expert-fetcher"):
            self.assertGreater(rep["peak_memory"][svc]["vm_hwm_bytes"], 0)
        return rep

    def test_budgets_are_distinct(self):
        b = self.budgets
        self.assertIsNotNone(b["middle"], "no budget pins only part of the trunk")
        self.assertEqual(b["n_lo"], 0)
        self.assertLess(b["stream"], b["middle"])
        self.assertLess(b["middle"], b["pinned"])

    def test_ids_match_standalone_all_budgets_all_backends(self):
        for name in ("stream", "middle", "pinned"):
            for io in ("pread", "direct", "uring", "mmap"):
                with self.subTest(budget=name, io=io):
                    rep = self.run_and_compare(self.budgets[name], io)
                    if name == "stream":
                        # everything streams: the trunk reader must have read the layers again
                        self.assertGreater(rep["service_stats"]["trunk-reader"].get("bytes_read", 0), 0)

    def kill_mid_run(self, exe, after_tokens=2, budget=None, extra=()):
        p = self.launch(budget or self.budgets["stream"], extra=extra)
        victim = service_pid(p.pid, exe)
        # wait for a couple of generated tokens, then kill -9 the service
        got = []
        while len(got) < after_tokens:
            line = p.stdout.readline()
            if not line:
                break
            got.append(int(line))
        os.kill(victim, signal.SIGKILL)
        out, err = self.finish(p)
        got += [int(x) for x in out.split()]
        self.assertClean(p.pid)
        self.assertEqual(p.returncode, 0, err[-3000:])
        self.assertIn("killed by signal 9", err)
        self.assertEqual(got, self.expected, err[-3000:])

    def test_kill_expert_fetcher(self):
        self.kill_mid_run("k3-expert-fetcher")

    def test_kill_trunk_reader(self):
        self.kill_mid_run("k3-trunk-reader")

    def test_kill_trunk_reader_with_pieces(self):
        # Every streamed layer in pieces (the smallest slots): a restarted reader costs time,
        # not tokens, whatever piece compute was waiting for or holding.
        self.kill_mid_run("k3-trunk-reader", extra=["--trunk-piece", "4096"])

    def test_kill_expert_fetcher_with_hints(self):
        # A restarted fetcher starts empty while compute's guesses keep coming: same ids.
        self.kill_mid_run("k3-expert-fetcher", budget=self.hint_budgets()[0])

    def test_kill_compute_ends_run(self):
        p = self.launch(self.budgets["stream"], extra=["--gen", "400", "--ignore-eos"])
        victim = service_pid(p.pid, "k3-compute")
        self.assertTrue(p.stdout.readline().strip())  # generation is under way
        os.kill(victim, signal.SIGKILL)
        out, err = self.finish(p)
        self.assertClean(p.pid)
        self.assertEqual(p.returncode, 1, err)
        self.assertIn("compute killed by signal 9", err)

    def test_sigterm_stops_cleanly(self):
        p = self.launch(self.budgets["stream"], extra=["--gen", "200", "--ignore-eos"])
        service_pid(p.pid, "k3-compute")
        line = p.stdout.readline()  # generation is under way
        self.assertTrue(line.strip())
        p.send_signal(signal.SIGTERM)
        out, err = self.finish(p)
        self.assertEqual(p.returncode, 5, err)
        self.assertClean(p.pid)

    def test_trunk_pieces_match_standalone(self):
        # Ring slots smaller than a layer (docs/trunk-pieces.md): every streamed layer arrives in
        # pieces (row blocks of its matrices), and ids and the first token's logits stay
        # bit-identical to standalone's, at the pieced floor and with half the trunk pinned.
        sa_logits = os.path.join(self.tmp, "pieces-standalone.f32")
        r = subprocess.run([os.path.join(BIN, "k3-compute"), "--standalone", MODEL, "--ids", IDS, "--gen",
                            str(GEN), "--threads", "1", "--dump-logits", sa_logits],
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(sa_logits, "rb") as f:
            want_logits = f.read()
        for piece in ("4096", "48K"):
            flag = ["--trunk-piece", piece]
            r = subprocess.run([os.path.join(BIN, "k3-launch"), self.toml, "--budget", "1", "--dry-run"] + flag,
                               capture_output=True, text=True, timeout=TIMEOUT)
            self.assertEqual(r.returncode, 6, r.stderr)
            floor = floor_bytes(r.stderr)
            self.assertLess(floor, self.floor, "smaller slots lower the floor")
            # A budget that pins some layers and streams the others in pieces (bisected).
            lo, hi, middle = floor, self.budgets["pinned"], None
            for _ in range(40):
                m = (lo + hi) // 2
                plan = subprocess.run([os.path.join(BIN, "k3-launch"), self.toml, "--budget", str(m), "--dry-run"]
                                      + flag, capture_output=True, text=True, timeout=TIMEOUT).stdout
                n = int([l for l in plan.splitlines() if l.startswith("pinned layers:")][0].split(":")[1].split(" of ")[0])
                if 0 < n < self.budgets["total"]:
                    middle = m
                    break
                lo, hi = (m, hi) if n == 0 else (lo, m)
            self.assertIsNotNone(middle, "no budget pins part of the trunk with pieces")
            # Multi-run pieces through every read backend (ids; the logits below use pread).
            for io in ("direct", "uring", "mmap"):
                with self.subTest(piece=piece, io=io):
                    p = self.launch(floor, io=io, extra=flag)
                    out, err = self.finish(p)
                    self.assertClean(p.pid)
                    self.assertEqual(p.returncode, 0, err[-3000:])
                    self.assertEqual([int(x) for x in out.split()], self.expected, err[-3000:])
            for budget in (floor, middle):
                with self.subTest(piece=piece, budget=budget):
                    plan = subprocess.run([os.path.join(BIN, "k3-launch"), self.toml, "--budget", str(budget),
                                           "--dry-run"] + flag, capture_output=True, text=True, timeout=TIMEOUT)
                    self.assertIn("layers in pieces", plan.stdout)
                    logits = os.path.join(self.tmp, "pieces-%s-%d.f32" % (piece, budget))
                    p = self.launch(budget, extra=flag + ["--dump-logits", logits])
                    out, err = self.finish(p)
                    self.assertClean(p.pid)
                    self.assertEqual(p.returncode, 0, err[-3000:])
                    self.assertEqual([int(x) for x in out.split()], self.expected, err[-3000:])
                    with open(logits, "rb") as f:
                        self.assertEqual(f.read(), want_logits, "logits differ from standalone")

    def test_budget_below_floor_refused(self):
        p = self.launch(self.floor - 1)
        out, err = self.finish(p)
        self.assertEqual(p.returncode, 6, err)
        self.assertIn("floor", err)
        self.assertIn(str(self.floor), err)
        self.assertEqual(out, "")
        self.assertClean(p.pid)

    def test_expert_inputs_bf16_matches_standalone(self):
        # The option reaches compute through the launcher (TOML key, then the flag overriding it)
        # and gives the standalone ids of the same option, at a streaming and the middle budget.
        r = subprocess.run([os.path.join(BIN, "k3-compute"), "--standalone", MODEL, "--ids", IDS,
                            "--gen", str(GEN), "--threads", "1", "--expert-inputs", "bf16"],
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        want = [int(x) for x in r.stdout.split()]
        toml = os.path.join(self.tmp, "bf16.toml")
        with open(toml, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\nio = "pread"\ngen = %d\nthreads = 1\nexpert_inputs = "bf16"\n'
                    % (MODEL, GEN))
        # The middle run also probes read bandwidth between steps (benchmarks): same ids, one
        # probe per decode step in compute's stats.
        for budget, flag in ((self.budgets["stream"], []),
                             (self.budgets["middle"], ["--expert-inputs", "bf16", "--probe-membw"])):
            out_json = os.path.join(self.tmp, "bf16-%d.json" % budget)
            p = subprocess.Popen([os.path.join(BIN, "k3-launch"), toml, "--budget", str(budget), "--ids", IDS,
                                  "--out", out_json] + flag, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out, err = self.finish(p)
            self.assertClean(p.pid)
            self.assertEqual(p.returncode, 0, err[-3000:])
            self.assertEqual([int(x) for x in out.split()], want)
            with open(out_json) as f:
                rep = json.load(f)
            self.assertEqual(rep["expert_inputs"], "bf16")
            stats = rep["service_stats"]["compute"]
            if "--probe-membw" in flag:
                self.assertEqual(stats["membw_probe_passes"], GEN - 1)
                self.assertGreater(stats["membw_probe_median_gbs"], 0)
                self.assertIn("read-bandwidth probe", err)
            else:
                self.assertEqual(stats["membw_probe_passes"], 0)
            self.assertIn("routed-expert inputs bf16", err)
        # A bad value is a usage error naming the flag.
        r = subprocess.run([os.path.join(BIN, "k3-launch"), self.toml, "--ids", IDS, "--expert-inputs", "fp8"],
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--expert-inputs", r.stderr)

    @classmethod
    def plan_counts(cls, budget):
        """(pinned layers, expert slots) of the plan at `budget`."""
        r = cls.dry_run(budget)
        assert r.returncode == 0, r.stderr
        line = [l for l in r.stdout.splitlines() if l.startswith("pinned layers:")][0]
        return int(line.split(":")[1].split(" of ")[0]), int(line.rsplit("expert slots", 1)[1])

    @classmethod
    def hint_budgets(cls):
        """(a budget that pins every layer and holds 2..all-1 layers' experts, one that holds as
        many experts but streams some layers); found once with the planner."""
        if not hasattr(cls, "_hint_budgets"):
            with open(os.path.join(MODEL, "config.json")) as f:
                tc = json.load(f)["text_config"]
            k = tc["num_experts_per_token"]
            every = (tc["num_hidden_layers"] - tc["first_k_dense_replace"]) * tc["num_experts"]
            budget = streaming = None
            for delta in range(1, 256):
                b = cls.floor + delta * (1 << 17)
                pinned, slots = cls.plan_counts(b)
                if 2 * k <= slots < every:
                    if pinned == cls.budgets["total"]:
                        budget = b
                        break
                    if pinned > 0 and streaming is None:
                        streaming = b
            cls._hint_budgets = (budget, streaming)
        return cls._hint_budgets

    def test_prefetch_hints(self):
        # Where the plan pins every layer and gives the experts room for two layers but not for
        # all of them, compute sends its next-layer guesses (on by default) and the fetcher reads
        # them ahead; the ids are the standalone ones with and without guesses, and the TOML key
        # and the flag both switch them off. With trunk layers streaming no guesses are sent.
        budget, streaming = self.hint_budgets()
        self.assertIsNotNone(budget, "no budget pins every layer and holds 2..all-1 layers' experts")
        self.assertIsNotNone(streaming, "no budget streams layers and holds 2..all-1 layers' experts")
        self.assertIn("next-layer expert hints: on\n", self.dry_run(budget).stdout)
        self.assertIn("next-layer expert hints: off, trunk layers stream\n", self.dry_run(streaming).stdout)
        off_toml = os.path.join(self.tmp, "nohints.toml")
        with open(off_toml, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\nio = "pread"\ngen = %d\nthreads = 1\nprefetch_hints = false\n'
                    % (MODEL, GEN))
        reps = {}
        for tag, toml, extra, b in (("on", self.toml, [], budget),
                                    ("flag-off", self.toml, ["--no-prefetch-hints"], budget),
                                    ("toml-off", off_toml, [], budget), ("streaming", self.toml, [], streaming)):
            out_json = os.path.join(self.tmp, "hints-%s.json" % tag)
            p = subprocess.Popen([os.path.join(BIN, "k3-launch"), toml, "--budget", str(b), "--ids", IDS,
                                  "--out", out_json] + extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
            out, err = self.finish(p)
            self.assertClean(p.pid)
            self.assertEqual(p.returncode, 0, err[-3000:])
            self.assertEqual([int(x) for x in out.split()], self.expected, tag)
            with open(out_json) as f:
                reps[tag] = json.load(f)
            reps[tag]["_stderr"] = err
        on = reps["on"]
        sent = on["service_stats"]["compute"]["hints_sent"]
        fetcher = on["service_stats"]["expert-fetcher"]
        self.assertTrue(on["prefetch_hints"])
        self.assertGreater(sent, 0)
        self.assertGreater(fetcher["hints_received"], 0)
        self.assertLessEqual(fetcher["hints_received"], sent)
        self.assertGreater(on["prefetch_reads"], 0)
        self.assertLessEqual(on["prefetch_used"], on["prefetch_reads"])
        self.assertGreater(on["hint_recall"], 0.0)
        self.assertLessEqual(on["hint_recall"], 1.0)
        self.assertIn("next-layer expert hints: recall", on["_stderr"])
        for tag in ("flag-off", "toml-off", "streaming"):
            off = reps[tag]
            self.assertFalse(off["prefetch_hints"], tag)
            self.assertEqual(off["service_stats"]["compute"]["hints_sent"], 0, tag)
            self.assertEqual(off["service_stats"]["expert-fetcher"]["hints_received"], 0, tag)
            self.assertEqual(off["prefetch_reads"], 0, tag)

    def test_unknown_toml_key(self):
        bad = os.path.join(self.tmp, "bad.toml")
        with open(bad, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\nbudgett = "2G"\n' % MODEL)
        r = subprocess.run([os.path.join(BIN, "k3-launch"), bad, "--ids", IDS], capture_output=True,
                           text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 2)
        self.assertIn("budgett", r.stderr)


class ReleasePlanTest(unittest.TestCase):
    """--dry-run on the real release metadata (config.json + index only)."""
    RELEASE = os.environ.get("K3_RELEASE", os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "k3-release")))

    def test_release_plans(self):
        if not BIN or not os.path.isdir(self.RELEASE):
            self.skipTest("no release metadata")
        toml = os.path.join(tempfile.mkdtemp(prefix="k3-pipe-rel-"), "r.toml")
        with open(toml, "w") as f:
            f.write('model = "%s"\n' % self.RELEASE)
        def pinned_at(budget, extra=()):
            r = subprocess.run([os.path.join(BIN, "k3-launch"), toml, "--budget", budget, "--dry-run"] + list(extra),
                               capture_output=True, text=True, timeout=TIMEOUT)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("config + index", r.stdout)
            for region in ("trunk-pinned", "trunk-ring", "experts", "kda-state", "mla-cache"):
                self.assertIn(region, r.stdout)
            line = [l for l in r.stdout.splitlines() if l.startswith("pinned layers:")][0]
            return int(line.split(":")[1].split(" of ")[0]), r.stdout

        # Whole-layer slots (--trunk-piece layer), 8G, at a prefill chunk of 64: lm_head (2.19 GiB)
        # and layer 0 (2.18 GiB) pinned, a ring of 2 x 1.18 GiB; 4G is below the floor. At the
        # chunk the plan chooses (docs/memory-plan.md, "Real release") the whole context's
        # scratch is cheaper than those pins: nothing pinned, chunk 4096.
        whole = ["--trunk-piece", "layer"]
        pinned = [pinned_at(b, whole + ["--prefill-chunk", "64"])[0] for b in ("8G", "32G", "128G")]
        self.assertEqual(pinned[0], 1)
        n8, out8 = pinned_at("8G", whole)
        self.assertEqual(n8, 0)
        self.assertIn("prefill chunk: 4096 tokens", out8)
        self.assertLess(pinned[0], pinned[1])
        self.assertEqual(pinned[2], 93)
        r = subprocess.run([os.path.join(BIN, "k3-launch"), toml, "--budget", "4G", "--dry-run"] + whole,
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 6)
        self.assertIn("floor", r.stderr)
        # Trunk pieces (the default, docs/trunk-pieces.md): 2G plans with the layers in pieces,
        # and the room the small ring frees at 8G pins at least one 2.18 GiB layer.
        n2, out2 = pinned_at("2G")
        self.assertEqual(n2, 0)
        self.assertIn("layers in pieces", out2)
        self.assertGreater(pinned_at("8G")[0], 0)
        self.assertEqual(pinned_at("128G")[0], 93)
        r = subprocess.run([os.path.join(BIN, "k3-launch"), toml, "--budget", "1G", "--dry-run"],
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 6)
        self.assertIn("floor", r.stderr)


if __name__ == "__main__":
    require(BIN and os.path.isdir(MODEL), "K3_BIN / K3_TESTDATA not set")
    main()
