#!/usr/bin/env python3
"""k3-launch --connect URL against a real k3-launch --serve on loopback (demo model):
docs/chat.md "A running server".

- --prompt through the server (key from --api-key-file, no TOML) gives the ids and text of a
  local --prompt run with the same seed and sampling (temperature 0.8), and the summary line;
- --chat through the server (stdin piped, key from $K3_API_KEY) gives the replies the API gives
  to the same conversation asked directly (server_openai compares those with a local --chat),
  and its --out report names the server;
- failures are one line and a documented exit code: a wrong key (401: 2), a URL that is not the
  API (404: 2), nothing listening (1), https and --connect with --serve (2); the server keeps
  serving after each;
- Ctrl-C during a streamed prompt closes the stream: exit 5, and the server counts the request
  cancelled.
Under ASan (K3_SANITIZED=1) the comparison with a local run is left to the Release pass.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import free_port, last_line, launcher, main, run_launch, start_launch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "models", "k3-demo-tiny")
KEY = "k3-test-key-123"
PROMPT = "Once upon a time"
SAMPLING = ["--temperature", "0.8", "--seed", "7"]
LINES = "Hello!\nTell me a fortune.\n"


def connect(*args, env=None, input=None):
    e = dict(os.environ)
    e.pop("K3_API_KEY", None)
    e.update(env or {})
    return subprocess.run([launcher()] + [str(a) for a in args], capture_output=True, text=True, errors="replace",
                          env=e, input=input, timeout=120)


class Connect(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-connect-")
        cls.cfg = os.path.join(cls.tmp, "demo.toml")
        with open(cls.cfg, "w") as f:
            f.write('model = "%s"\ntokenizer = "%s"\nbudget = "2G"\ncontext = 1024\n' % (DEMO, DEMO))
        cls.key_file = os.path.join(cls.tmp, "key")
        with open(cls.key_file, "w") as f:
            f.write(KEY + "\n")
        os.chmod(cls.key_file, 0o600)  # api_key_file must be the owner's alone (docs/exit-codes.md)
        cls.port = free_port()
        cls.url = "http://127.0.0.1:%d" % cls.port
        cls.err = open(os.path.join(cls.tmp, "serve.err"), "w")
        cls.server = start_launch(cls.cfg, "--serve", "127.0.0.1:%d" % cls.port, stdout=subprocess.DEVNULL,
                                  stderr=cls.err, env=dict(os.environ, K3_API_KEY=KEY))
        deadline = time.time() + 60
        while True:
            assert cls.server.poll() is None, "the server exited"
            try:
                with urllib.request.urlopen(cls.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.time() < deadline, "no /health 200 within 60 s"
            time.sleep(0.1)

    @classmethod
    def tearDownClass(cls):
        cls.server.send_signal(2)
        cls.server.wait(timeout=30)
        cls.err.close()

    def test_prompt_same_ids_as_local(self):
        ref = run_launch(self.cfg, "--prompt", PROMPT, "--gen", 12, "--quiet", *SAMPLING,
                         out=os.path.join(self.tmp, "ref.json"), timeout=120)
        self.assertEqual(ref.returncode, 0, ref.stderr)
        out = os.path.join(self.tmp, "remote.json")
        r = connect("--prompt", PROMPT, "--gen", 12, *SAMPLING, "--connect", self.url, "--api-key-file",
                    self.key_file, "--out", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            rep = json.load(f)
        self.assertEqual(rep["generated_ids"], ref.report["generated_ids"])
        self.assertEqual(len(rep["generated_ids"]), 12)
        self.assertEqual(rep["generated_text"], ref.report["generated_text"])
        self.assertEqual(r.stdout.rstrip("\n"), ref.report["generated_text"].rstrip("\n"))
        self.assertEqual(rep["finish_reason"], "length")
        self.assertEqual(rep["usage"]["completion_tokens"], 12)
        self.assertEqual(rep["usage"]["prompt_tokens"], len(ref.report["prompt_ids"]))
        self.assertRegex(last_line(r.stderr), r"^\[connect\] 12 tokens \(length\) in [0-9.]+ s, first token [0-9.]+ s, "
                                              r"[0-9.]+ tokens/s; %d prompt tokens, \d+ cached$" % len(ref.report["prompt_ids"]))

    def test_chat_same_replies_as_the_api(self):
        # The reference: the same two turns asked of the API directly (urllib, not streamed);
        # server_openai checks those against a local --chat.
        out = os.path.join(self.tmp, "chat-remote.json")
        # /set reaches the requests: the reference asks with the same temperature and seed.
        r = connect("--chat", "--no-think", "--reply-limit", 12, "--connect", self.url + "/v1", "--out", out,
                    env={"K3_API_KEY": KEY},
                    input="/set temperature 0.9\n/set seed 3\n/set top_p 2\n" + LINES)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            rep = json.load(f)
        self.assertEqual(rep["server"], self.url + "/v1")
        self.assertEqual(rep["end"], "end_of_input")
        remote = rep["turns"]
        self.assertEqual(len(remote), 2)
        messages = []
        for line, turn in zip(LINES.splitlines(), remote):
            messages.append({"role": "user", "content": line})
            ref = self.ask({"model": "k3-demo-tiny", "messages": messages, "reasoning_effort": "none",
                            "temperature": 0.9, "seed": 3, "max_completion_tokens": 12})
            choice = ref["choices"][0]
            self.assertEqual(turn["response"], choice["message"]["content"])
            self.assertEqual(turn["generated_tokens"], ref["usage"]["completion_tokens"])
            self.assertEqual(turn["finish_reason"], choice["finish_reason"])
            self.assertIn(turn["response"].strip().splitlines()[0], r.stdout)
            messages.append({"role": "assistant", "content": turn["response"]})
        self.assertIn("[chat] /set: --top-p 2: must be in (0, 1]", r.stderr)  # refused, the chat went on
        # The second turn: the conversation sent whole, its first turn from the server's prefix cache.
        self.assertGreater(remote[1]["reused_tokens"], 0)
        self.assertRegex(r.stderr, r"\[chat\] 12 tokens \(--reply-limit 12 reached\) in [0-9.]+ s, first token [0-9.]+ s, "
                                   r"[0-9.]+ tokens/s; \d+ ids reused, \d+ prefilled")

    def ask(self, body):
        req = urllib.request.Request(self.url + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.load(resp)

    def cancelled(self):
        req = urllib.request.Request(self.url + "/metrics", headers={"Authorization": "Bearer " + KEY})
        with urllib.request.urlopen(req, timeout=10) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith('k3_requests_total{outcome="cancelled"}'):
                    return float(line.rsplit(" ", 1)[1])
        return 0.0

    def test_ctrl_c_closes_the_stream(self):
        before = self.cancelled()
        e = dict(os.environ, K3_API_KEY=KEY)
        p = subprocess.Popen([launcher(), "--prompt", PROMPT, "--gen", "1000", "--ignore-eos", "--connect", self.url],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", env=e)
        first = p.stdout.read(8)  # the reply is streaming
        self.assertTrue(first)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 5, err)
        self.assertIn("interrupted by SIGINT; the request was cancelled", last_line(err))
        # The server saw the stream close and cancelled the request (docs/server.md), and serves on.
        deadline = time.time() + 20
        while self.cancelled() < before + 1:
            self.assertLess(time.time(), deadline, "the server did not count the request as cancelled")
            time.sleep(0.1)

    def test_failures(self):
        cases = [
            (["--prompt", "x", "--connect", self.url, "--api-key", "wrong"], 2, "answered 401"),
            (["--prompt", "x", "--connect", self.url + "/nope", "--api-key-file", self.key_file], 2, "answered 404"),
            (["--prompt", "x", "--connect", "http://127.0.0.1:%d" % free_port()], 1, "cannot connect to"),
            (["--chat", "--connect", "https://127.0.0.1:1"], 2, "https is not spoken"),
            ([self.cfg, "--serve", "127.0.0.1:0", "--connect", self.url], 2, "--connect and --serve exclude"),
            (["--connect", self.url], 2, "--connect needs --chat"),
        ]
        for args, code, text in cases:
            r = connect(*args, input="")
            self.assertEqual(r.returncode, code, (args, r.stderr))
            line = last_line(r.stderr)
            self.assertTrue(line.startswith("k3-launch: "), (args, r.stderr))
            self.assertIn(text, line, args)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, (args, r.stderr))
        # Still serving: a right key works after them.
        r = connect("--prompt", "x", "--gen", 2, "--connect", self.url, env={"K3_API_KEY": KEY})
        self.assertEqual(r.returncode, 0, r.stderr)


SANITIZED = ("test_chat_same_replies_as_the_api", "test_ctrl_c_closes_the_stream", "test_failures")

if __name__ == "__main__":
    if os.environ.get("K3_SANITIZED") == "1":
        for name in SANITIZED:
            sys.argv += ["-k", name]
    main()
