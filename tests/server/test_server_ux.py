"""k3-server as clients use it (issue 24, "The server, as clients use it"): one
`k3-launch --serve 127.0.0.1:0` on the demo model with a key read from `--api-key-file`, a
server-side max_tokens default and limit, and small prefill chunks, driven by the official
openai npm package (client.mjs) and raw HTTP.

Checked against what the client sees, never against the server's own numbers alone: the port
in the --out file and the "serving at" line is the one that answers; token counts against
returned ids; timings against the usage and the client's clock; /metrics through the
Prometheus project's own parser (python3-prometheus-client); Retry-After against the mean
request duration read from /metrics. Exit 77 (skipped) without the openai package or the
parser.
"""
import http.client
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_server import BIN, MODEL, NAME, PROMPT, Server, request, write_config  # noqa: E402
from proc_util import main, require, start_launch  # noqa: E402

KEY = "sk-ux-" + "5" * 24
LIMIT, DEFAULT, CHUNK = 600, 5, 16
# Two prompts, each of several prefill chunks (the second shares no prefix with the first).
LONG_PROMPTS = ("The old lighthouse keeper wrote in his log every night about the storms, the ships and "
                "the strange lights he saw far out over the water, and nobody believed a word of it.",
                "Seven small goats crossed the mountain bridge in the rain while the farmer counted them "
                "twice, sang to them and promised each one a warm barn and a bucket of fresh oats.")
# Under the sanitizers (K3_SANITIZED=1, the ASan pass) only the cases through raw HTTP run: they
# reach every new server path (headers of errors, the gate, the histograms); the SDK's requests,
# which add model runs, stay in the Release pass (the unit tests cover their shaping under ASan).
SANITIZED = ("test_a_body_without", "test_api_key_file", "test_wrong_method", "test_queue_full", "test_metrics",
             "test_port_zero")
PREFILL_LINE = re.compile(r"\[launch\] prefill: (\d+) of (\d+), 100%, ([0-9.]+) tokens/s")


class PortZeroServer(Server):
    """`k3-launch --serve 127.0.0.1:0 --out FILE`: the port is found in FILE, as a script would."""

    def __init__(self, d, args=(), key=None):
        self.stderr_path = os.path.join(d, "launch-ux.err")
        self.out = os.path.join(d, "serving.json")
        self.err = open(self.stderr_path, "wb")
        self.t0 = time.time()
        self.p = start_launch(write_config(d), "--serve", "127.0.0.1:0", *args, out=self.out,
                              stdout=subprocess.DEVNULL, stderr=self.err, text=False)
        self.key = key
        deadline = time.time() + 60
        while not os.path.exists(self.out):
            assert self.p.poll() is None, "k3-launch --serve exited %s: %s" % (self.p.returncode, self.stderr())
            assert time.time() < deadline, "no --out file within 60 s: " + self.stderr()
            time.sleep(0.05)
        with open(self.out) as f:
            self.report = json.load(f)
        self.port = self.report["port"]
        self.base = "http://127.0.0.1:%d" % self.port
        # --out is written once every service is ready; /health turns 200 a few tokenizer round
        # trips later (the chat control ids), so a first request must wait for it as a client would.
        while raw(self.port, "GET", "/health")[0] != 200:
            assert time.time() < deadline, "no /health 200 within 60 s: " + self.stderr()
            time.sleep(0.05)


def raw(port, method, path, body=b"", headers=None):
    """(status, headers dict with lower-case names, body text) of one request on a new connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    out = r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    conn.close()
    return out


def metric_families(base):
    from prometheus_client.parser import text_string_to_metric_families
    _, text = request("GET", base + "/metrics", headers={"Authorization": "Bearer " + KEY})
    return {f.name: f for f in text_string_to_metric_families(text)}, text


def histogram(families, name):
    """{le: cumulative count}, sum, count of histogram `name` as the parser read it."""
    f = families[name]
    assert f.type == "histogram", (name, f.type)
    buckets, total, count = {}, None, None
    for s in f.samples:
        if s.name == name + "_bucket":
            buckets[float(s.labels["le"])] = s.value
        elif s.name == name + "_sum":
            total = s.value
        elif s.name == name + "_count":
            count = s.value
    return buckets, total, count


class ServerUxTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-server-ux-")
        cls.key_file = os.path.join(cls.tmp, "api-key")
        with open(cls.key_file, "w") as f:
            f.write(KEY + "\n")
        os.chmod(cls.key_file, 0o600)
        cls.srv = PortZeroServer(cls.tmp, ["--api-key-file", cls.key_file, "--max-tokens-default", DEFAULT,
                                           "--max-tokens-limit", LIMIT, "--prefill-chunk", CHUNK,
                                           "--queue-size", "1"], key=KEY)
        cls.auth = {"Authorization": "Bearer " + KEY}
    _sdk = None

    @property
    def sdk(self):
        """The official client's requests, in one node process (each start costs a second on a busy
        machine), run when a case first needs them: what those cases check."""
        if ServerUxTest._sdk is None:
            ServerUxTest._sdk = dict(zip(
                ("models", "chat", "timings", "streamed", "long0", "long1", "default", "over", "over_chat"),
                self.srv.client("sequence", list=[
                    {"op": "models_full"},
                    {"model": NAME, "messages": [{"role": "user", "content": "Tell me a story about a dragon."}],
                     "max_tokens": 24, "return_token_ids": True},
                    {"model": NAME, "prompt": "A quiet morning in the valley", "max_tokens": 12, "ignore_eos": True},
                    {"model": NAME, "prompt": PROMPT, "max_tokens": 6, "ignore_eos": True, "stream": True},
                    {"model": NAME, "prompt": LONG_PROMPTS[0], "max_tokens": 1},
                    {"model": NAME, "prompt": LONG_PROMPTS[1], "max_tokens": 1},
                    {"model": NAME, "prompt": PROMPT, "ignore_eos": True},
                    {"model": NAME, "prompt": PROMPT, "max_tokens": LIMIT + 1},
                    {"model": NAME, "messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": LIMIT + 1}])))
        return ServerUxTest._sdk

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def open_stream(self, body):
        """A streamed completion whose first event has come: (the connection, its first bytes). Closing
        the connection makes compute cancel the request."""
        conn = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=60)
        conn.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True)),
                     headers=dict(self.auth, **{"Content-Type": "application/json"}))
        r = conn.getresponse()
        self.assertEqual(r.status, 200)
        first = b""
        while b"data: {" not in first:  # ": waiting" comments may come first (docs/server.md)
            first += r.read(1)
        return _Closing(conn, r), first[first.index(b"data: {"):]

    def post(self, path, body, headers=None):
        return raw(self.srv.port, "POST", path, json.dumps(body).encode(),
                   dict(self.auth, **{"Content-Type": "application/json"}, **(headers or {})))

    def test_port_zero_reports_the_bound_port(self):
        port = self.srv.port
        self.assertGreater(port, 0)
        self.assertEqual(self.srv.report["url"], "http://127.0.0.1:%d" % port)
        self.assertEqual(self.srv.report["model"], NAME)
        self.assertEqual(self.srv.report["pid"], self.srv.p.pid)
        self.assertIn("serving at http://127.0.0.1:%d (Ctrl-C stops)" % port, self.srv.stderr())
        st, _, text = raw(port, "GET", "/v1/models", b"", self.auth)  # it answers there
        self.assertEqual((st, [m["id"] for m in json.loads(text)["data"]]), (200, [NAME]))

    def test_api_key_file_keeps_the_key_off_command_lines(self):
        self.assertEqual(request("GET", self.srv.base + "/v1/models")[0], 401)
        self.assertEqual(request("GET", self.srv.base + "/v1/models", headers=self.auth)[0], 200)
        pids = [self.srv.p.pid] + [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == self.srv.p.pid]
        for pid in pids:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                self.assertNotIn(KEY.encode(), f.read(), pid)
        # A key file others can read is refused before anything starts: one line, exit 7.
        loose = os.path.join(self.tmp, "loose-key")
        with open(loose, "w") as f:
            f.write(KEY + "\n")
        os.chmod(loose, 0o644)
        r = subprocess.run([os.path.join(BIN, "k3-launch"), write_config(self.tmp), "--serve", "127.0.0.1:0",
                            "--api-key-file", loose], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 7, r.stderr)
        self.assertEqual(r.stderr.strip().splitlines(),
                         ["k3-launch: api_key_file %s: other users can access it (mode 0644); chmod 600 it" % loose])

    def test_a_body_without_content_type_is_json_with_a_key(self):
        # docs/server.md's curl example without -H: over 8 KiB (httplib's limit for form bodies).
        body = (json.dumps({"model": NAME, "prompt": PROMPT, "max_tokens": 2}) + " " * 10000).encode()
        st, _, text = raw(self.srv.port, "POST", "/v1/completions", body, self.auth)  # http.client adds no type
        self.assertEqual(st, 200, text)
        self.assertEqual(json.loads(text)["usage"]["completion_tokens"], 2)
        # A non-JSON type stays 415 with a key too.
        st, _, _ = raw(self.srv.port, "POST", "/v1/completions", body,
                       dict(self.auth, **{"Content-Type": "application/x-www-form-urlencoded"}))
        self.assertEqual(st, 415)

    def test_wrong_method_is_405_with_allow(self):
        for method, path, allow in (("GET", "/v1/completions", "POST"), ("GET", "/v1/chat/completions", "POST"),
                                    ("POST", "/v1/models", "GET, HEAD"), ("DELETE", "/v1/models/" + NAME, "GET, HEAD")):
            st, headers, text = raw(self.srv.port, method, path, b"", self.auth)
            self.assertEqual(st, 405, (method, path, text))
            self.assertEqual(headers.get("allow"), allow, (method, path))
            self.assertEqual(json.loads(text)["error"]["code"], "method_not_allowed")
        self.assertEqual(raw(self.srv.port, "GET", "/v1/nothing", b"", self.auth)[0], 404)

    def test_models_created_is_the_server_start(self):
        listed = self.sdk["models"]
        created = [m["created"] for m in listed["data"]]
        self.assertEqual(len(created), 1)
        self.assertGreaterEqual(created[0], int(self.srv.t0) - 1)  # after k3-launch started
        self.assertLessEqual(created[0], time.time())
        self.assertEqual(listed["retrieved"]["created"], created[0])  # the same every time

    def test_max_tokens_default_and_limit(self):
        r = self.sdk["default"]["response"]
        self.assertEqual(r["usage"]["completion_tokens"], DEFAULT)  # no max_tokens: the default
        self.assertEqual(r["choices"][0]["finish_reason"], "length")
        for e, field in ((self.sdk["over"], "max_tokens"), (self.sdk["over_chat"], "max_completion_tokens")):
            self.assertEqual(e["status"], 400)
            self.assertEqual(e["error"]["message"], "'%s' %d is above this server's limit of %d (max_tokens_limit)"
                             % (field, LIMIT + 1, LIMIT))
        # The limit itself is taken: a stream whose first event comes (then its client goes away).
        conn, first = self.open_stream({"model": NAME, "prompt": PROMPT, "max_tokens": LIMIT, "ignore_eos": True})
        self.assertTrue(first.startswith(b"data: {"), first)
        conn.close()

    def test_reasoning_tokens_count_the_reasoning_ids(self):
        r = self.sdk["chat"]["response"]
        ids = r["choices"][0]["token_ids"]
        # The demo vocabulary (docs/demo-model.md): <|open|> 4099, <|close|> 4100, <|sep|> 4101. The
        # reply starts inside the think channel; everything before <|open|>response<|sep|> reasons.
        tag = [int(x) for x in subprocess.run([os.path.join(BIN, "k3-tokenizer"), "encode", "--vocab", MODEL],
                                              input="response", capture_output=True, text=True,
                                              timeout=30).stdout.split(",")]
        opening = [4099] + tag + [4101]  # <|open|>response<|sep|>
        starts = [i for i in range(len(ids)) if ids[i:i + len(opening)] == opening]
        self.assertEqual(len(starts), 1, ids)
        reasoning = starts[0] + len(opening)  # every id before the answer's first
        usage = r["usage"]
        self.assertEqual(usage["completion_tokens_details"]["reasoning_tokens"], reasoning, ids)
        self.assertEqual(usage["completion_tokens"], len(ids))
        self.assertGreater(reasoning, 0)
        self.assertTrue(r["choices"][0]["message"]["content"])  # the answer began: its first id is there

    def test_timings_as_llama_cpp_names_them(self):
        r, chunks, took_ms = self.sdk["timings"]["response"], self.sdk["streamed"]["chunks"], self.sdk["timings"]["ms"]
        t, u = r["timings"], r["usage"]
        self.assertEqual(t["cache_n"], u["prompt_tokens_details"]["cached_tokens"])
        self.assertEqual(t["prompt_n"] + t["cache_n"], u["prompt_tokens"])
        self.assertEqual(t["predicted_n"], u["completion_tokens"])
        self.assertGreater(t["prompt_ms"], 0)
        self.assertGreater(t["predicted_ms"], 0)
        self.assertLess(t["prompt_ms"] + t["predicted_ms"], took_ms)
        self.assertAlmostEqual(t["predicted_per_token_ms"] * (t["predicted_n"] - 1), t["predicted_ms"], places=6)
        self.assertAlmostEqual(t["predicted_per_second"] * t["predicted_per_token_ms"], 1000, places=6)
        self.assertAlmostEqual(t["prompt_per_second"] * t["prompt_ms"], 1000 * t["prompt_n"], places=3)
        # Streamed: the last chunk (the one with finish_reason) carries them.
        last = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
        self.assertEqual(len(last), 1)
        self.assertEqual(last[0]["timings"]["predicted_n"], 6)
        self.assertEqual([c for c in chunks if "timings" in c], last)

    def test_metrics_histograms(self):
        before, _ = metric_families(self.srv.base)
        t0 = time.monotonic()
        st, _, answer = self.post("/v1/completions", {"model": NAME, "prompt": PROMPT, "max_tokens": 8, "ignore_eos": True})
        took = time.monotonic() - t0
        self.assertEqual(st, 200, answer)
        after, text = metric_families(self.srv.base)
        names = ("k3_first_token_seconds", "k3_time_per_output_token_seconds", "k3_queue_wait_seconds",
                 "k3_request_duration_seconds")
        for name in names:
            b0, s0, c0 = histogram(before, name)
            b1, s1, c1 = histogram(after, name)
            self.assertEqual(c1 - c0, 1, name)                         # one more request observed
            self.assertEqual(b1[math.inf], c1, name)                   # +Inf is the count
            les = sorted(b1)
            self.assertTrue(all(b1[a] <= b1[b] for a, b in zip(les, les[1:])), name)  # cumulative
            self.assertGreaterEqual(s1 - s0, 0, name)
            self.assertLessEqual(s1 - s0, took, name)                  # within the client's wait
        first = histogram(after, "k3_first_token_seconds")[1] - histogram(before, "k3_first_token_seconds")[1]
        whole = (histogram(after, "k3_request_duration_seconds")[1] -
                 histogram(before, "k3_request_duration_seconds")[1])
        self.assertLess(first, whole)
        self.assertEqual(json.loads(answer)["usage"]["completion_tokens"], 8)
        for line in text.splitlines():  # strict: every sample line is NAME{LABELS} VALUE
            if line and not line.startswith("#"):
                self.assertRegex(line, r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-z_]+="[^"]*"\})? [-+0-9.eEinfINFNa]+$')

    def test_queue_full_429_has_retry_after(self):
        # One runs (a stream held open), one waits (queue_size 1): a third is refused at once.
        conn, _ = self.open_stream({"model": NAME, "prompt": PROMPT, "max_tokens": LIMIT, "ignore_eos": True})
        waiting = threading.Thread(target=self.post, args=("/v1/completions", {"model": NAME, "prompt": "x",
                                                                               "max_tokens": 1}))
        waiting.start()
        deadline = time.time() + 10
        while metric_families(self.srv.base)[0]["k3_queue_depth"].samples[0].value < 1:
            self.assertLess(time.time(), deadline, "the second request never waited")
            time.sleep(0.02)
        _, s, c = histogram(metric_families(self.srv.base)[0], "k3_request_duration_seconds")
        st, headers, text = self.post("/v1/completions", {"model": NAME, "prompt": "x", "max_tokens": 1})
        conn.close()  # the stream's client goes away: compute cancels it
        waiting.join(timeout=30)
        self.assertEqual(st, 429, text)
        self.assertEqual(json.loads(text)["error"]["code"], "queue_full")
        # A place opens about when a running request ends: the mean duration, whole seconds, at least 1.
        self.assertEqual(headers.get("retry-after"), str(max(1, math.ceil(s / c)) if c else 1))

    def test_each_long_prefill_gets_its_line_at_its_own_rate(self):
        # Prompts of several prefill chunks: each ends with its line, at that request's rate (compute's
        # prefill time, as timings' prompt_ms also gives it), not the first Generate's.
        want = {self.sdk[name]["response"]["timings"]["prompt_n"] for name in ("long0", "long1")}
        deadline = time.time() + 10
        while not want <= {int(l[1]) for l in PREFILL_LINE.findall(self.srv.stderr())} and time.time() < deadline:
            time.sleep(0.05)  # the launcher prints them as compute's Stats arrive
        lines = PREFILL_LINE.findall(self.srv.stderr())
        for name in ("long0", "long1"):
            t = self.sdk[name]["response"]["timings"]
            self.assertGreater(t["prompt_n"], CHUNK)  # more than one chunk
            mine = [l for l in lines if int(l[0]) == int(l[1]) == t["prompt_n"]]
            self.assertEqual(len(mine), 1, (name, t, lines))
            rate, want = float(mine[0][2]), t["prompt_per_second"]
            self.assertTrue(want / 3 < rate < want * 3, (name, rate, want))
        self.assertNotEqual(self.sdk["long0"]["response"]["timings"]["prompt_n"],
                            self.sdk["long1"]["response"]["timings"]["prompt_n"])  # told apart by length


def _parent(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


class _Closing:
    """A streamed response and its connection, closed together (the socket stays open while either
    holds it)."""

    def __init__(self, conn, response):
        self.conn, self.response = conn, response

    def close(self):
        self.response.close()
        self.conn.close()


if __name__ == "__main__":
    require(os.path.exists(os.path.join(HERE, "node_modules", "openai", "package.json")),
            "the openai npm package is not installed (tests/server/setup.sh)")
    try:
        import prometheus_client.parser  # noqa: F401
    except ImportError:
        require(False, "python3-prometheus-client is not installed (scripts/install-deps.sh --tests)")
    if os.environ.get("K3_SANITIZED") == "1":
        for name in SANITIZED:
            sys.argv += ["-k", name]
    main()
