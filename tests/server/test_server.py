"""k3-server end to end: `k3-launch CONFIG --serve` on the bundled demo model (real services,
real sockets), driven by the official openai npm package (client.mjs) and raw HTTP.

References are independent of the server: the same prompt through `k3-launch --prompt` (and
`--chat` for chat), whose ids and text the existing pipeline tests check against standalone
compute. Environment: K3_BIN (binaries), K3_SOURCE (the repository: models/k3-demo-tiny).
Exit 77 (skipped) when the openai package is not installed (tests/server/setup.sh).

Under the sanitizers (K3_SANITIZED=1, the ASan pass) only the cases in SANITIZED run: the HTTP
edges, errors, cancels, batching, restarts and stops, where memory errors would hide. The
reference comparisons (the *_matches_launch cases, and the two that start further servers)
run the same server code with more model runs and stay in the Release pass: 140 s of the ASan
pass (2026-12-02) became about half.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

BIN = os.environ.get("K3_BIN", "")
SANITIZED = ("test_models", "test_stop_string_cancels", "test_errors", "test_a_web_page_cannot_drive",
             "test_queue_full_is_429", "test_concurrent_requests_get_solo_tokens", "test_client_disconnect_cancels",
             "test_metrics", "test_kill_weight_services_keeps_tokens", "ServeModeTest")
SOURCE = os.environ.get("K3_SOURCE", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(SOURCE, "models", "k3-demo-tiny")
NAME = "k3-demo-tiny"
PROMPT = "Once upon a time"

sys.path.insert(0, os.path.join(SOURCE, "tests", "pipeline"))
from proc_util import children_of, free_port, main, require, run_launch, service_pid, shm_names, start_launch  # noqa: E402
sys.path.insert(0, HERE)
from tools_cases import ToolCases  # noqa: E402


def write_config(d, extra=""):
    path = os.path.join(d, "serve.toml")
    with open(path, "w") as f:
        f.write('model = "%s"\ntokenizer = "%s"\nbudget = "2G"\ncontext = 1024\n%s' % (MODEL, MODEL, extra))
    return path


def request(method, url, body=None, headers=None, timeout=30):
    """(status, body text) of one request."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metrics(base):
    _, text = request("GET", base + "/metrics")
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


class Server:
    """One `k3-launch --serve` run."""

    def __init__(self, d, args=(), extra="", key=None, host="127.0.0.1"):
        self.port = free_port()
        self.stderr_path = os.path.join(d, "launch-%d.err" % self.port)
        self.err = open(self.stderr_path, "wb")
        self.p = start_launch(write_config(d, extra), "--serve", "%s:%d" % (host, self.port), *args,
                              stdout=subprocess.DEVNULL, stderr=self.err, text=False)
        self.base = "http://127.0.0.1:%d" % self.port
        self.key = key
        deadline = time.time() + 60
        while True:
            assert self.p.poll() is None, "k3-launch --serve exited %s: %s" % (self.p.returncode, self.stderr())
            try:
                if request("GET", self.base + "/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            assert time.time() < deadline, "no /health 200 within 60 s: " + self.stderr()
            time.sleep(0.1)

    def stderr(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def client(self, op, **kw):
        spec = dict(kw, base=self.base + "/v1", op=op)
        if self.key:
            spec["key"] = self.key
        r = subprocess.run(["node", os.path.join(HERE, "client.mjs"), json.dumps(spec)], capture_output=True, timeout=180)
        if r.returncode != 0:
            raise AssertionError("client.mjs %s failed: %s" % (op, r.stderr.decode()))
        return json.loads(r.stdout)

    def stop(self, sig=signal.SIGINT):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            self.p.wait(timeout=30)
        self.err.close()


def launch_reference(d, prompt, gen, args=()):
    """The same prompt through `k3-launch --prompt`: its report."""
    out = os.path.join(d, "ref.json")
    r = run_launch(write_config(d), "--prompt", prompt, "--gen", gen, "--quiet", *args, out=out, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.report


def chat_reference(d, text, gen):
    """One turn of `k3-launch --chat` (stdin piped): the turn of its --out report."""
    out = os.path.join(d, "chat.json")
    r = run_launch(write_config(d), "--chat", "--gen", gen, "--quiet", out=out, input=text + "\n/quit\n", timeout=120)
    assert r.returncode == 0, r.stderr
    return r.report["turns"][0]


def sse_events(base, path, body, headers=None):
    """The raw server-sent events of a streamed request (the data lines, in order)."""
    conn = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=60)
    conn.request("POST", path, body=json.dumps(body), headers=dict({"Content-Type": "application/json"}, **(headers or {})))
    r = conn.getresponse()
    assert r.status == 200, (r.status, r.read())
    assert r.getheader("Content-Type", "").startswith("text/event-stream")
    text = r.read().decode()
    conn.close()
    return [l[len("data: "):] for l in text.split("\n\n") if l.startswith("data: ")]


class ServerTest(ToolCases, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-server-test-")
        # One request runs, two may wait: the third waiting one is refused (429).
        # Trunk layers stream and expert slots are few, so the weight services read during requests.
        cls.srv = Server(cls.tmp, ["--queue-size", "2", "--max-body-bytes", "65536"],
                         extra="max_pinned_trunk = 0\nexpert_slots = 16\n")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def complete(self, **params):
        params.setdefault("model", NAME)
        params.setdefault("prompt", PROMPT)
        return self.srv.client("create", params=params)["response"]

    def test_models(self):
        r = self.srv.client("models")
        self.assertEqual(r["ids"], [NAME])
        self.assertEqual(r["unknown_status"], 404)

    def test_completion_matches_launch(self):
        ref = launch_reference(self.tmp, PROMPT, 24)
        r = self.complete(max_tokens=24, return_token_ids=True)
        choice = r["choices"][0]
        self.assertEqual(choice["token_ids"], ref["generated_ids"])
        self.assertEqual(r["prompt_token_ids"], ref["prompt_ids"])
        self.assertEqual(choice["text"], ref["generated_text"])
        self.assertEqual(choice["finish_reason"], ref["finish_reason"])
        self.assertEqual(r["object"], "text_completion")
        u = r["usage"]
        self.assertEqual(u["prompt_tokens"], len(ref["prompt_ids"]))
        self.assertEqual(u["completion_tokens"], len(ref["generated_ids"]))
        self.assertEqual(u["total_tokens"], u["prompt_tokens"] + u["completion_tokens"])
        # The same prompt may have run before (the prefix cache is on in serve mode): at most all but
        # its last id come from a snapshot, with the same tokens.
        self.assertGreaterEqual(u["prompt_tokens_details"]["cached_tokens"], 0)
        self.assertLess(u["prompt_tokens_details"]["cached_tokens"], u["prompt_tokens"])

    def test_seeded_sampling_matches_launch(self):
        ref = launch_reference(self.tmp, PROMPT, 20, ["--temperature", "0.9", "--top-p", "0.95", "--top-k", "40",
                                                      "--seed", "1234", "--ignore-eos"])
        params = dict(max_tokens=20, temperature=0.9, top_p=0.95, top_k=40, seed=1234, ignore_eos=True,
                      return_token_ids=True)
        a = self.complete(**params)["choices"][0]
        b = self.complete(**params)["choices"][0]
        self.assertEqual(a["token_ids"], ref["generated_ids"])
        self.assertEqual(b["token_ids"], ref["generated_ids"])
        self.assertEqual(a["finish_reason"], "length")

    def test_logprobs_match_launch(self):
        ref = launch_reference(self.tmp, PROMPT, 8, ["--logprobs", "3", "--ignore-eos"])
        r = self.complete(max_tokens=8, logprobs=3, ignore_eos=True)["choices"][0]
        lp = r["logprobs"]
        self.assertEqual(len(lp["tokens"]), 8)
        self.assertEqual("".join(lp["tokens"]), r["text"])
        for got, want in zip(lp["token_logprobs"], ref["logprobs"]):
            self.assertAlmostEqual(got, want["logprob"], places=5)
        for top, want in zip(lp["top_logprobs"], ref["logprobs"]):
            self.assertEqual(sorted(top.values(), reverse=True)[:1], [max(a["logprob"] for a in want["top"])])
        self.assertEqual(lp["text_offset"][0], 0)
        chat = self.srv.client("create", params={"model": NAME, "messages": [{"role": "user", "content": "Hi"}],
                                                 "max_tokens": 30, "logprobs": True, "top_logprobs": 2})
        content = chat["response"]["choices"][0]["logprobs"]["content"]
        self.assertEqual("".join(t["token"] for t in content), chat["response"]["choices"][0]["message"]["content"])
        self.assertTrue(all(len(t["top_logprobs"]) == 2 and t["logprob"] <= 0 for t in content))

    def test_chat_matches_launch_chat(self):
        ref = chat_reference(self.tmp, "Hello, who are you?", 60)
        msgs = [{"role": "user", "content": "Hello, who are you?"}]
        r = self.srv.client("create", params={"model": NAME, "messages": msgs, "max_tokens": 60})["response"]
        m = r["choices"][0]["message"]
        self.assertEqual(r["object"], "chat.completion")
        self.assertEqual(m["role"], "assistant")
        self.assertEqual(m["content"], ref["response"])
        self.assertEqual(m["reasoning_content"], ref["reasoning"])
        self.assertEqual(r["usage"]["completion_tokens"], ref["generated_tokens"])
        self.assertEqual(r["choices"][0]["finish_reason"], {"stop": "stop", "length": "length"}[ref["finish_reason"]])
        # Streamed through the SDK: the deltas join to the same message.
        s = self.srv.client("create", params={"model": NAME, "messages": msgs, "max_tokens": 60, "stream": True,
                                              "stream_options": {"include_usage": True}})["chunks"]
        content = "".join(c["choices"][0]["delta"].get("content") or "" for c in s if c["choices"])
        reasoning = "".join(c["choices"][0]["delta"].get("reasoning_content") or "" for c in s if c["choices"])
        self.assertEqual(content, m["content"])
        self.assertEqual(reasoning, m["reasoning_content"])
        self.assertEqual(s[0]["choices"][0]["delta"]["role"], "assistant")
        self.assertEqual([c["choices"][0]["finish_reason"] for c in s if c["choices"]][-1], r["choices"][0]["finish_reason"])
        self.assertEqual(s[-1]["usage"]["completion_tokens"], r["usage"]["completion_tokens"])
        self.assertTrue(all(c["object"] == "chat.completion.chunk" for c in s))
        # Raw SSE: data lines of chunks, ending with [DONE].
        ev = sse_events(self.srv.base, "/v1/chat/completions", {"model": NAME, "messages": msgs, "max_tokens": 60,
                                                               "stream": True})
        self.assertEqual(ev[-1], "[DONE]")
        raw = "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in ev[:-1])
        self.assertEqual(raw, m["content"])

    def test_stop_string_cancels(self):
        full = self.complete(max_tokens=40, ignore_eos=True)["choices"][0]["text"]
        self.assertGreater(len(full), 12)
        stop = full[6:10]
        r = self.complete(max_tokens=40, ignore_eos=True, stop=[stop])
        choice = r["choices"][0]
        self.assertEqual(choice["text"], full[:full.index(stop)])
        self.assertEqual(choice["finish_reason"], "stop")
        self.assertLess(r["usage"]["completion_tokens"], 40)  # compute was cancelled

    def test_errors(self):
        base = self.srv.base
        st, body = request("POST", base + "/v1/completions", b"{not json", {"Content-Type": "application/json"})
        self.assertEqual(st, 400)
        self.assertEqual(json.loads(body)["error"]["type"], "invalid_request_error")
        cases = [({"model": NAME}, 400),                                       # no prompt
                 ({"model": NAME, "prompt": "x", "temperature": -1}, 400),      # bad value
                 ({"model": NAME, "prompt": "x", "top_p": 1.5}, 400),
                 ({"model": NAME, "prompt": "x", "max_tokens": 0}, 400),
                 ({"model": NAME, "prompt": [999999]}, 400),                    # id outside the vocabulary
                 ({"model": NAME, "prompt": "x " * 2000}, 400),                 # longer than the context
                 ({"model": "gpt-4", "prompt": "x"}, 404),                      # unknown model
                 ({"model": NAME, "prompt": "x" * 70000}, 413)]                 # over --max-body-bytes
        for params, status in cases:
            r = self.srv.client("error", params=params)
            self.assertEqual(r["status"], status, params if len(json.dumps(params)) < 200 else status)
            self.assertIn("message", r["error"])
        r = self.srv.client("error", params={"model": NAME, "messages": [{"role": "wizard", "content": "x"}]})
        self.assertEqual(r["status"], 400)
        st, body = request("GET", base + "/v1/nothing")
        self.assertEqual(st, 404)
        self.assertIn("error", json.loads(body))
        # Still serving.
        self.assertEqual(self.complete(max_tokens=4)["choices"][0]["index"], 0)

    def test_a_web_page_cannot_drive_the_key_less_server(self):
        # A browser's simple requests (no preflight): text/plain or form bodies, 415 before any
        # work; DNS rebinding (the page's own name pointing here) is a foreign Host, 403.
        base, body = self.srv.base, json.dumps({"model": NAME, "prompt": "x", "max_tokens": 1}).encode()
        before = metrics(base)
        for ctype in ("text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=b"):
            st, text = request("POST", base + "/v1/completions", body, {"Content-Type": ctype})
            self.assertEqual(st, 415, text)
            self.assertEqual(json.loads(text)["error"]["code"], "unsupported_media_type")
        st, text = request("POST", base + "/v1/completions", body,
                           {"Content-Type": "application/json", "Host": "rebound.example:%d" % self.srv.port})
        self.assertEqual(st, 403, text)
        st, text = request("GET", base + "/v1/models", headers={"Host": "rebound.example"})
        self.assertEqual(st, 403, text)
        self.assertEqual(metrics(base).get("k3_requests_total{outcome=\"completed\"}", 0),
                         before.get("k3_requests_total{outcome=\"completed\"}", 0))  # nothing ran
        st, _ = request("POST", base + "/v1/completions", body,
                        {"Content-Type": "application/json", "Host": "localhost:%d" % self.srv.port})
        self.assertEqual(st, 200)

    def test_queue_full_is_429(self):
        long = dict(model=NAME, prompt=PROMPT, max_tokens=300, ignore_eos=True)
        # The first is running when the other four arrive.
        rs = self.srv.client("concurrent", list=[long] * 5, delays=[0, 500, 500, 500, 500])
        statuses = sorted(r.get("status") or 200 for r in rs)
        # One runs, two wait, the others are refused at once.
        self.assertEqual(statuses, [200, 200, 200, 429, 429], rs)
        refused = [r for r in rs if r.get("status") == 429]
        self.assertEqual(refused[0]["error"]["type"], "rate_limit_error")
        self.assertEqual(self.complete(max_tokens=4)["choices"][0]["index"], 0)

    def test_concurrent_requests_get_solo_tokens(self):
        params = [dict(model=NAME, prompt=p, max_tokens=16, temperature=t, seed=s, return_token_ids=True)
                  for p, t, s in (("Once upon a time", 0, 1), ("The cat", 0.8, 7), ("Why", 1.0, 99))]
        solo = [self.srv.client("create", params=p)["response"]["choices"][0]["token_ids"] for p in params]
        together = self.srv.client("concurrent", list=params, delays=[0, 200, 200])
        self.assertEqual([r["response"]["choices"][0]["token_ids"] for r in together], solo)
        ref = launch_reference(self.tmp, "The cat", 16, ["--temperature", "0.8", "--seed", "7"])
        self.assertEqual(solo[1], ref["generated_ids"])

    def test_client_disconnect_cancels(self):
        before = metrics(self.srv.base)
        r = self.srv.client("abort", params=dict(model=NAME, prompt=PROMPT, max_tokens=900, ignore_eos=True,
                                                  stream=True), after=3)
        self.assertEqual(r["chunks"], 3)
        # A non-streamed request whose client goes away while it runs.
        s = socket.create_connection(("127.0.0.1", self.srv.port))
        body = json.dumps(dict(model=NAME, prompt=PROMPT, max_tokens=900, ignore_eos=True)).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % len(body) + body)
        time.sleep(1.5)
        s.close()
        deadline = time.time() + 20
        while metrics(self.srv.base)['k3_requests_total{outcome="cancelled"}'] < before['k3_requests_total{outcome="cancelled"}'] + 2:
            self.assertLess(time.time(), deadline, "the two requests were not cancelled")
            time.sleep(0.1)
        # Compute ended them early (Cancel), and the next request is served.
        while self.srv.stderr().count("(ended by cancel)") < 2:
            self.assertLess(time.time(), deadline, "compute did not end both requests by a Cancel")
            time.sleep(0.1)
        after = metrics(self.srv.base)
        self.assertLess(after["k3_generated_tokens_total"] - before["k3_generated_tokens_total"], 1)
        t0 = time.time()
        self.assertEqual(self.complete(max_tokens=4)["choices"][0]["index"], 0)
        self.assertLess(time.time() - t0, 10)

    def test_metrics(self):
        before = metrics(self.srv.base)
        t0 = time.monotonic()
        r = self.complete(max_tokens=10, ignore_eos=True)
        took = time.monotonic() - t0
        after = metrics(self.srv.base)
        # First-token time: one more request had one, after its Generate and before its answer.
        self.assertEqual(after["k3_first_token_seconds_count"] - before["k3_first_token_seconds_count"], 1)
        first = after["k3_first_token_seconds_sum"] - before["k3_first_token_seconds_sum"]
        self.assertGreater(first, 0)
        self.assertLessEqual(first, took)
        self.assertEqual(after['k3_first_token_seconds_bucket{le="+Inf"}'], after["k3_first_token_seconds_count"])
        self.assertEqual(after['k3_requests_total{outcome="completed"}'] - before['k3_requests_total{outcome="completed"}'], 1)
        self.assertEqual(after["k3_generated_tokens_total"] - before["k3_generated_tokens_total"],
                         r["usage"]["completion_tokens"])
        self.assertEqual(after["k3_prompt_tokens_total"] - before["k3_prompt_tokens_total"], r["usage"]["prompt_tokens"])
        self.assertEqual(after["k3_queue_depth"], 0)
        # compute's Steps: the prompt ids it fed (those no snapshot saved), then one decode row
        # per generated token but the last (which is never fed).
        u = r["usage"]
        fed = u["prompt_tokens"] - u["prompt_tokens_details"]["cached_tokens"]
        prefill = after["k3_step_prefill_rows_total"] - before["k3_step_prefill_rows_total"]
        self.assertEqual(prefill, fed)
        self.assertEqual(after["k3_step_rows_total"] - before["k3_step_rows_total"] - prefill,
                         u["completion_tokens"] - 1)
        for name in ("k3_batch_size", "k3_step_seconds", "k3_bytes_read_per_step", "k3_expert_hit_rate",
                     'k3_requests_total{outcome="rejected"}'):
            self.assertIn(name, after)
        # The fetcher's live Stats, relayed by the launcher: experts were requested.
        deadline = time.time() + 5
        while metrics(self.srv.base)["k3_expert_requests_total"] <= 0:
            self.assertLess(time.time(), deadline)
            time.sleep(0.2)
        m = metrics(self.srv.base)
        self.assertAlmostEqual(m["k3_expert_hit_rate"], m["k3_expert_hits_total"] / m["k3_expert_requests_total"], places=6)

    def test_prefix_cache_next_chat_turn(self):
        # A conversation's second request sends the first back with one more message: it starts
        # from a snapshot of the first (cached_tokens > 0) and gets the tokens of a server whose
        # prefix cache is off, where every prompt is prefilled from nothing.
        first = [{"role": "system", "content": "You are a terse storyteller."},
                 {"role": "user", "content": "Tell me about a dragon."}]
        params = dict(model=NAME, max_tokens=24, return_token_ids=True)

        def conversation(srv):
            a = srv.client("create", params=dict(params, messages=first))["response"]
            msg = a["choices"][0]["message"]
            second = first + [{"role": "assistant", "content": msg["content"]},
                              {"role": "user", "content": "And then what happened?"}]
            b = srv.client("create", params=dict(params, messages=second, temperature=0.8, seed=11))["response"]
            return a, b

        a, b = conversation(self.srv)
        self.assertIn("prefix cache: ", self.srv.stderr())
        self.assertNotIn("prefix cache: off", self.srv.stderr())
        off = Server(self.tmp, ["--prefix-cache", "0"])
        try:
            ref_a, ref_b = conversation(off)
            self.assertIn("prefix cache: off", off.stderr())
        finally:
            off.stop()
        cached = b["usage"]["prompt_tokens_details"]["cached_tokens"]
        print("prefix cache: the second turn started after %d of its %d prompt ids" % (cached, b["usage"]["prompt_tokens"]),
              file=sys.stderr)
        self.assertGreater(cached, 0)
        self.assertLess(cached, b["usage"]["prompt_tokens"])
        # The snapshot is of the first request: its prompt, then its answer.
        self.assertEqual(b["prompt_token_ids"][:cached], (a["prompt_token_ids"] + a["choices"][0]["token_ids"])[:cached])
        self.assertEqual(ref_b["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        self.assertEqual(ref_a["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        for got, want in ((a, ref_a), (b, ref_b)):
            self.assertEqual(got["prompt_token_ids"], want["prompt_token_ids"])
            self.assertEqual(got["choices"][0]["token_ids"], want["choices"][0]["token_ids"])
            self.assertEqual(got["choices"][0]["message"], want["choices"][0]["message"])
        self.assertGreater(len(b["choices"][0]["token_ids"]), 0)

    def test_prefix_store_outlives_the_server(self):
        # A server with --prefix-store answers a chat; a new server on the same directory answers
        # another chat with the same system message from the stored preamble (Generate.snapshot_at:
        # the conversation before the newest message), with the tokens of the shared server
        # without a store.
        store = os.path.join(self.tmp, "prefix-store")
        system = {"role": "system", "content": "You are a patient teacher of geography and history."}
        params = dict(model=NAME, max_tokens=12, return_token_ids=True)
        first = dict(params, messages=[system, {"role": "user", "content": "Where is Lyon?"}])
        second = dict(params, messages=[system, {"role": "user", "content": "Who built the pyramids?"}])
        for n, req in enumerate((first, second)):
            srv = Server(self.tmp, ["--prefix-store", store])
            try:
                got = srv.client("create", params=req)["response"]
            finally:
                srv.stop()
        cached = got["usage"]["prompt_tokens_details"]["cached_tokens"]
        ids = got["prompt_token_ids"]
        eom = 4098  # <|end_of_msg|> in the demo vocabulary (docs/demo-model.md)
        ends = [i + 1 for i, t in enumerate(ids) if t == eom]
        self.assertEqual(cached, ends[-2], "the preamble: up to the end of the message before the user's")
        ref = self.srv.client("create", params=second)["response"]
        self.assertEqual(got["prompt_token_ids"], ref["prompt_token_ids"])
        self.assertEqual(got["choices"][0]["token_ids"], ref["choices"][0]["token_ids"])

    def test_kill_weight_services_keeps_tokens(self):
        params = dict(model=NAME, prompt="The king", max_tokens=150, ignore_eos=True, return_token_ids=True)
        want = self.srv.client("create", params=params)["response"]["choices"][0]["token_ids"]
        for exe in ("k3-trunk-reader", "k3-expert-fetcher"):
            pid = service_pid(self.srv.p.pid, exe)
            c = subprocess.Popen(["node", os.path.join(HERE, "client.mjs"),
                                  json.dumps({"base": self.srv.base + "/v1", "op": "create", "params": params})],
                                 stdout=subprocess.PIPE)
            time.sleep(0.3)
            os.kill(pid, signal.SIGKILL)
            out, _ = c.communicate(timeout=120)
            self.assertEqual(c.returncode, 0)
            self.assertEqual(json.loads(out)["response"]["choices"][0]["token_ids"], want, exe)
            self.assertNotEqual(service_pid(self.srv.p.pid, exe), pid)  # restarted


class ServeModeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="k3-serve-mode-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_non_loopback_needs_key(self):
        r = subprocess.run([os.path.join(BIN, "k3-launch"), write_config(self.tmp), "--serve", "0.0.0.0:%d" % free_port()],
                           capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.decode().strip().splitlines()), 1, r.stderr)
        self.assertIn("--api-key", r.stderr.decode())

    def test_no_tokenizer_is_exit_2(self):
        model = os.path.join(self.tmp, "model")
        os.mkdir(model)
        for f in os.listdir(MODEL):
            if f not in ("tiktoken.model", "tokenizer_config.json"):
                os.symlink(os.path.join(MODEL, f), os.path.join(model, f))
        cfg = os.path.join(self.tmp, "c.toml")
        with open(cfg, "w") as f:
            f.write('model = "%s"\nbudget = "2G"\n' % model)
        r = subprocess.run([os.path.join(BIN, "k3-launch"), cfg, "--serve", "127.0.0.1:%d" % free_port()],
                           capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--serve needs a tokenizer", r.stderr.decode().strip().splitlines()[-1])

    def test_api_key_and_busy_threads(self):
        srv = Server(self.tmp, ["--api-key", "sekrit", "--http-threads", "1"], key="sekrit")
        try:
            self.assertEqual(srv.client("models")["ids"], [NAME])
            st, body = request("GET", srv.base + "/v1/models", headers={"Authorization": "Bearer wrong"})
            self.assertEqual(st, 401)
            # The scheme in any case (RFC 7235); with a key the Host is not checked.
            st, _ = request("GET", srv.base + "/v1/models", headers={"Authorization": "bearer sekrit", "Host": "k3.example"})
            self.assertEqual(st, 200)
            self.assertEqual(json.loads(body)["error"]["code"], "invalid_api_key")
            self.assertEqual(request("GET", srv.base + "/v1/models")[0], 401)
            self.assertEqual(request("GET", srv.base + "/health")[0], 200)
            # The one connection thread is busy with a stream: another connection is 429 at once.
            long = dict(model=NAME, prompt=PROMPT, max_tokens=600, ignore_eos=True, stream=True)
            c = subprocess.Popen(["node", os.path.join(HERE, "client.mjs"),
                                  json.dumps({"base": srv.base + "/v1", "key": "sekrit", "op": "create", "params": long})],
                                 stdout=subprocess.PIPE)
            # Until the stream's connection is up (node may take over a second to start), without a
            # request of our own that could take the one thread first.
            deadline = time.time() + 30
            while not subprocess.run(["ss", "-Htn", "state", "established", "sport = :%d" % srv.port],
                                     capture_output=True, text=True).stdout.strip():
                self.assertLess(time.time(), deadline, "the stream never connected")
                time.sleep(0.05)
            time.sleep(0.5)
            t0 = time.time()
            st, body = request("GET", srv.base + "/v1/models", headers={"Authorization": "Bearer sekrit"})
            self.assertEqual(st, 429)
            self.assertLess(time.time() - t0, 1.0)
            self.assertEqual(json.loads(body)["error"]["type"], "rate_limit_error")
            # A monitor still sees a healthy server, not a refusal.
            self.assertEqual(request("GET", srv.base + "/health")[0], 200)
            c.communicate(timeout=120)
            self.assertEqual(c.returncode, 0)
        finally:
            srv.stop()

    def test_health_503_until_every_service_is_ready(self):
        # k3-server alone: nobody relays the other services' Ready, so it never becomes healthy.
        port = free_port()
        run = "ipc://@k3-server-test-%d-%d" % (os.getpid(), port)
        p = subprocess.Popen([os.path.join(BIN, "k3-server"), "--control", run + "/control", "--compute", run + "/compute",
                              "--tokenizer", run + "/tokenizer", "--listen", "127.0.0.1:%d" % port, "--model-name", NAME,
                              "--vocab-size", "4352", "--wait-for", "trunk-reader,compute"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            base = "http://127.0.0.1:%d" % port
            deadline = time.time() + 20
            while True:
                try:
                    st, body = request("GET", base + "/health", timeout=2)
                    break
                except OSError:
                    self.assertLess(time.time(), deadline, "k3-server never listened")
                    time.sleep(0.05)
            self.assertEqual(st, 503)
            self.assertIn("trunk-reader, compute", json.loads(body)["error"]["message"])
            st, body = request("POST", base + "/v1/completions", json.dumps({"model": NAME, "prompt": "x"}).encode(),
                               {"Content-Type": "application/json"})
            self.assertEqual(st, 503)
            self.assertEqual(json.loads(body)["error"]["type"], "server_error")
        finally:
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=10)
        self.assertEqual(p.returncode, 5, err)

    def test_ctrl_c_stops_everything_within_3s(self):
        srv = Server(self.tmp)
        pid = srv.p.pid
        kids = children_of(pid)
        self.assertEqual(len(kids), 5)  # trunk reader, fetcher, compute, tokenizer, server
        long = dict(model=NAME, prompt=PROMPT, max_tokens=900, ignore_eos=True, stream=True)
        c = subprocess.Popen(["node", os.path.join(HERE, "client.mjs"),
                              json.dumps({"base": srv.base + "/v1", "op": "create", "params": long})],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(1.0)
        t0 = time.time()
        srv.p.send_signal(signal.SIGINT)
        code = srv.p.wait(timeout=10)
        took = time.time() - t0
        srv.err.close()
        print("Ctrl-C during a stream: k3-launch exited %d after %.2f s" % (code, took), file=sys.stderr)
        self.assertLess(took, 3.0)
        self.assertEqual(code, 5)
        self.assertTrue(all(not os.path.exists("/proc/%d" % k) for k in kids), kids)
        self.assertEqual(shm_names(pid), [])
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", srv.port), timeout=1).close()
        c.communicate(timeout=30)
        self.assertIn("interrupted by SIGINT; services stopped", srv.stderr().strip().splitlines()[-1])


if __name__ == "__main__":
    require(os.path.exists(os.path.join(HERE, "node_modules", "openai", "package.json")),
            "the openai npm package is not installed (tests/server/setup.sh)")
    if os.environ.get("K3_SANITIZED") == "1":
        for name in SANITIZED:
            sys.argv += ["-k", name]
    main()
