#!/usr/bin/env python3
"""k3-launch --chat in a real terminal (tmux): docs/chat.md.

- two turns with the demo model: both replies end by themselves (finish_reason "stop"); the
  second reuses the first's state (reused_tokens = turn 1's prompt + generated ids) and sends
  only its new ids (prompt_tokens = the ids after the first reply's <|end_of_msg|> in
  k3-tokenizer's rendering of the whole conversation); /quit exits 0; reasoning is shown
  apart from the answer;
- /save after turn 1, then /load in a new session: the same second turn gives the same reply
  with the same reuse, and Ctrl-D ends that session (exit 0);
- Ctrl-C during a reply (a random-weight model with the demo vocabulary, whose replies do not
  end) stops it: finish_reason "cancelled", the prompt comes back; the next turn reuses all of
  it (the stopped reply is closed on the kept state); Ctrl-C at the prompt then ends the
  session, exit 0.
Needs tmux (scripts/install-deps.sh --tests); exits 77 (skipped) without it.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import main, require  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "bin"))
DEMO = os.path.join(ROOT, "models", "k3-demo-tiny")
CONFIG = os.path.join(ROOT, "configs", "demo.toml")
PY = "/usr/bin/python3"
EOM = 4098  # <|end_of_msg|> of the demo vocabulary (docs/demo-model.md)


class Term:
    """k3-launch in a detached tmux session; the exit code lands in a file."""

    def __init__(self, tmp, name, args):
        self.tmp, self.name = tmp, f"k3chat-{os.getpid()}-{name}"
        self.rc_file = os.path.join(tmp, name + ".rc")
        cmd = " ".join([os.path.join(BIN, "k3-launch")] + [shlex_quote(a) for a in args])
        script = os.path.join(tmp, name + ".sh")
        with open(script, "w") as f:
            # The chat's input history goes to the test's directory, not the user's state directory.
            f.write(f"cd {shlex_quote(ROOT)}\nexport XDG_STATE_HOME={shlex_quote(tmp)}\n{cmd}\n"
                    f"echo $? > {shlex_quote(self.rc_file)}\n")
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "160", "-y", "60",
                        "bash " + shlex_quote(script) + "; sleep 600"], check=True)

    def screen(self):
        p = subprocess.run(["tmux", "capture-pane", "-p", "-J", "-S", "-2000", "-t", self.name],
                           capture_output=True, text=True)
        return p.stdout

    def keys(self, *keys):
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def type(self, text):
        subprocess.run(["tmux", "send-keys", "-t", self.name, "-l", text], check=True)
        self.keys("Enter")

    def wait(self, pred, what, timeout=120):
        end = time.time() + timeout
        while time.time() < end:
            s = self.screen()
            if pred(s):
                return s
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; screen:\n{self.screen()}")

    def prompts(self, s):
        return sum(1 for line in s.splitlines() if line.startswith("> ") or line == ">")

    def wait_prompt(self, n, timeout=120):
        """Waits for the n-th "> " prompt with nothing typed after it."""
        def ready(s):
            lines = [l for l in s.splitlines() if l.strip()]
            return self.prompts(s) >= n and lines and lines[-1].rstrip() == ">"
        return self.wait(ready, f"prompt {n}", timeout)

    def exit_code(self, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            if os.path.exists(self.rc_file):
                with open(self.rc_file) as f:
                    txt = f.read().strip()
                if txt:
                    return int(txt)
            time.sleep(0.2)
        raise AssertionError(f"k3-launch did not exit; screen:\n{self.screen()}")

    def close(self):
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def shlex_quote(s):
    import shlex
    return shlex.quote(s)


def render(history, thinking=True):
    """k3-tokenizer's rendering (effort max) of a history, with the generation prompt."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for m in history:
            f.write(json.dumps(m) + "\n")
    try:
        p = subprocess.run([os.path.join(BIN, "k3-tokenizer"), "chat", "--vocab", DEMO, "--history", f.name] +
                           ([] if thinking else ["--no-think"]),
                           capture_output=True, text=True, check=True)
    finally:
        os.unlink(f.name)
    return [int(x) for x in p.stdout.replace("\n", "").split(",") if x]


class ChatTmux(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-chat-")
        cls.terms = []

    @classmethod
    def tearDownClass(cls):
        for t in cls.terms:
            t.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def term(self, name, args):
        t = Term(self.tmp, name, args)
        self.terms.append(t)
        return t

    def ended(self, t, name, end):
        """Waits for the exit (code 0) and returns the session's --out report, checking its `end`."""
        self.assertEqual(t.exit_code(), 0, t.screen())
        with open(os.path.join(self.tmp, name + ".json")) as f:
            rep = json.load(f)
        self.assertEqual(rep["mode"], "chat")
        self.assertEqual(rep["end"], end)
        return rep

    def test_1_two_turns_save_load(self):
        out = os.path.join(self.tmp, "a.json")
        state = os.path.join(self.tmp, "chat.k3state")
        t = self.term("a", [CONFIG, "--chat", "--out", out])
        t.wait_prompt(1)
        u1, u2 = "Tell me a fortune.", "Another one, please."
        t.type(u1)
        t.wait_prompt(2)
        t.type("/save " + state)
        screen = t.wait(lambda s: "(saved " in s or "/save " + state + ":" in s.replace("[chat] ", ""), "/save answer")
        # State files are implemented (docs/chat.md): a /save that fails is a failure, not a skip.
        self.assertIn("(saved ", screen, "/save failed:\n" + screen)
        saved_tokens = int(screen.split("(saved ", 1)[1].split(" tokens to " + state + ")")[0])
        self.assertGreater(os.path.getsize(state), 0)
        t.wait_prompt(3)
        t.type(u2)
        t.wait_prompt(4)
        t.type("/quit")
        a1, a2 = self.ended(t, "a", "quit")["turns"]
        for turn in (a1, a2):
            self.assertEqual(turn["finish_reason"], "stop", f"the demo's reply did not end by itself: {turn}")
            self.assertTrue(turn["response"].strip(), turn)
        screen = t.screen()
        self.assertIn(a1["response"].strip().splitlines()[0], screen)
        if a1["reasoning"].strip():
            self.assertIn("thinking: ", screen)  # reasoning shown apart from the answer
        # Turn 1: the whole rendering; turn 2: only its new ids, on top of turn 1's state.
        r1 = render([{"role": "user", "content": u1}])
        self.assertEqual(a1["reused_tokens"], 0)
        self.assertEqual(a1["prompt_tokens"], len(r1))
        self.assertEqual(a2["reused_tokens"], a1["prompt_tokens"] + a1["generated_tokens"])
        r2 = render([{"role": "user", "content": u1},
                     {"role": "assistant", "content": a1["response"], "reasoning_content": a1["reasoning"]},
                     {"role": "user", "content": u2}])
        self.assertEqual(r2[:len(r1)], r1)
        new = r2[r2.index(EOM, len(r1)) + 1:]
        self.assertEqual(a2["prompt_tokens"], len(new))
        self.assertLess(a2["prompt_tokens"], len(r2) // 2)

        # A new session continues from the saved turn exactly as the first one did: the one turn
        # and the tokens /save wrote come back, and the same second turn gives the same reply on
        # the same reused state.
        t2 = self.term("b", [CONFIG, "--chat", "--out", os.path.join(self.tmp, "b.json")])
        t2.wait_prompt(1)
        t2.type("/load " + state)
        loaded = t2.wait(lambda s: "(loaded " in s or "/load " + state + ":" in s.replace("[chat] ", ""),
                         "/load answer")
        self.assertIn("(loaded 1 turns, %d tokens from %s)" % (saved_tokens, state), loaded)
        t2.wait_prompt(2)
        t2.type(u2)
        t2.wait_prompt(3)
        t2.keys("C-d")
        (b2,) = self.ended(t2, "b", "end_of_input")["turns"]
        for k in ("response", "reasoning", "prompt_tokens", "reused_tokens", "generated_tokens", "finish_reason"):
            self.assertEqual(b2[k], a2[k], k)

    def test_2_ctrl_c(self):
        # Random weights with the demo vocabulary: greedy replies that do not end.
        model = os.path.join(self.tmp, "random")
        subprocess.run([PY, os.path.join(ROOT, "tests", "generator", "make_checkpoint.py"), model,
                        "--preset", "tiny", "--vocab", "4352", "--seed", "3"], check=True, capture_output=True)
        for n in ("tiktoken.model", "tokenizer_config.json"):
            shutil.copy(os.path.join(DEMO, n), os.path.join(model, n))
        cfg = os.path.join(self.tmp, "random.toml")
        with open(cfg, "w") as f:
            f.write(f'model = "{model}"\ntokenizer = "{model}"\nbudget = "2G"\ncontext = 60000\n')
        out = os.path.join(self.tmp, "c.json")
        t = self.term("c", [cfg, "--chat", "--no-think", "--out", out])
        t.wait_prompt(1)
        t.type("Hello!")

        def streaming(typed):
            # The typed line must be on screen first: a Ctrl-C sent before the launcher has read
            # it would end the session at the prompt (what a loaded machine once showed).
            return lambda s: ("> " + typed) in s and len(s.split("> " + typed, 1)[1].strip()) > 20
        before = t.wait(streaming("Hello!"), "the reply streaming")
        t.keys("C-c")
        t.wait_prompt(2, timeout=30)
        # The next turn continues the stopped reply: it is closed on the kept state, not sent again.
        t.type("Again.")
        t.wait(streaming("Again."), "the second reply streaming")
        t.keys("C-c")
        t.wait_prompt(3, timeout=30)
        time.sleep(1.0)
        t.keys("C-c")  # at the prompt: ends the session
        turn, again = self.ended(t, "c", "interrupt")["turns"]
        for x in (turn, again):
            self.assertEqual(x["finish_reason"], "cancelled", x)
            self.assertGreater(x["generated_tokens"], 0)
            self.assertGreater(x["first_token_seconds"], 0)
        self.assertLess(turn["generated_tokens"], 60000 - turn["prompt_tokens"] - 1)
        # (This model's greedy reply has no <|open|>, <|close|> or <|sep|> in its first 400 ids,
        # so a reply stopped that early can be closed.)
        self.assertLess(turn["generated_tokens"], 400)
        self.assertEqual(again["reused_tokens"], turn["prompt_tokens"] + turn["generated_tokens"])
        # Sent: the ids that close the answer (the rendering's after the answer's text, which
        # holds no added ids) and the new turn.
        h1 = [{"role": "user", "content": "Hello!"}]
        r1 = render(h1, thinking=False)
        r2 = render(h1 + [{"role": "assistant", "content": turn["response"]}, {"role": "user", "content": "Again."}],
                    thinking=False)
        self.assertEqual(turn["prompt_tokens"], len(r1))
        closing_at = next(i for i in range(len(r1), len(r2)) if r2[i] >= 4096)
        self.assertEqual(again["prompt_tokens"], len(r2) - closing_at)
        self.assertIn("tokens (stopped by Ctrl-C)", t.screen())
        self.assertTrue(before)


if __name__ == "__main__":
    require(shutil.which("tmux"), "tmux is not installed (scripts/install-deps.sh --tests)")
    main()
