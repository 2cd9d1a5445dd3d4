#!/usr/bin/env python3
"""k3-launch --chat's line editing in a real terminal (tmux): docs/chat.md "Line editing",
"Input history", "/set".

Session 1 (demo model, thinking off, replies cut at 4 ids): a line edited with Left, Home, End,
Ctrl-A and Ctrl-E is sent as edited (its prompt_tokens are k3-tokenizer's rendering of the
edited text, and no escape sequence reaches the screen); /set shows and changes settings and
refuses a bad value with one line; /set think on turns thinking on for the next turn (rendered
with the thinking preamble); a block pasted with bracketed paste (tmux paste-buffer -p) is one message, newlines
included. Session 2, on the same history file: Up recalls the first session's lines, and the
recalled line is sent as typed then. Ctrl-D ends both (exit 0).
Needs tmux; exits 77 (skipped) without it.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import main, require  # noqa: E402
from test_chat_tmux import CONFIG, Term, render  # noqa: E402

EDITED = "<hello world?!>"
PASTED = "line one\nline two"


class ChatEditing(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="k3-edit-")
        self.history = os.path.join(self.tmp, "history.jsonl")
        self.terms = []

    def tearDown(self):
        for t in self.terms:
            t.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def session(self, name):
        t = Term(self.tmp, name, [CONFIG, "--chat", "--no-think", "--reply-limit", "4",
                                  "--input-history", self.history, "--out", os.path.join(self.tmp, name + ".json")])
        self.terms.append(t)
        return t

    def report(self, t, name):
        self.assertEqual(t.exit_code(), 0, t.screen())
        with open(os.path.join(self.tmp, name + ".json")) as f:
            rep = json.load(f)
        self.assertEqual(rep["end"], "end_of_input")
        return rep["turns"]

    def lit(self, t, text):
        t.keys("-l", text)

    def test_editing_set_paste_history(self):
        t = self.session("one")
        t.wait_prompt(1)
        self.lit(t, "world")
        t.keys("Home")
        self.lit(t, "hello ")
        t.keys("End")
        self.lit(t, "!")
        t.keys("Left")
        self.lit(t, "?")
        t.keys("C-a")
        self.lit(t, "<")
        t.keys("C-e")
        self.lit(t, ">")
        t.wait(lambda s: EDITED in s, "the edited line on screen")
        t.keys("Enter")
        t.wait_prompt(2)

        t.type("/set temperature 0.7")
        t.wait(lambda s: "(temperature 0.7 " in s, "/set's answer")
        t.wait_prompt(3)
        t.type("/set top_p 1.5")
        t.wait(lambda s: "/set: --top-p 1.5: must be in (0, 1]" in s, "the refusal")
        t.wait_prompt(4)
        t.type("/set")
        t.wait(lambda s: sum(1 for l in s.splitlines() if l.startswith("temperature 0.7 ") and "top_p 1 " in l) == 1,
               "/set alone: temperature kept, top_p unchanged")
        t.wait_prompt(5)
        t.type("/set temperature 0")
        t.wait_prompt(6)
        t.type("/set think on")
        t.wait(lambda s: "think on  effort max)" in s, "thinking on")
        t.wait_prompt(7)
        t.type("/reset")
        t.wait_prompt(8)
        subprocess.run(["tmux", "set-buffer", "-b", "k3paste", PASTED], check=True)
        subprocess.run(["tmux", "paste-buffer", "-p", "-d", "-b", "k3paste", "-t", t.name], check=True)
        t.wait(lambda s: "line two" in s, "the paste on screen")
        t.keys("Enter")
        t.wait_prompt(9)
        t.keys("C-d")
        first, pasted = self.report(t, "one")
        screen = t.screen()
        self.assertNotIn("^[", screen)  # no key reached the line as an escape sequence
        # The edited line is what the model got: the rendering of that text (thinking off).
        self.assertEqual(first["prompt_tokens"], len(render([{"role": "user", "content": EDITED}], thinking=False)))
        self.assertEqual(first["reasoning"], "")
        # After /reset and /set think on: the pasted block whole, as one message, thinking on.
        self.assertEqual(pasted["reused_tokens"], 0)
        thinking_on = render([{"role": "user", "content": PASTED}])
        self.assertNotEqual(len(thinking_on), len(render([{"role": "user", "content": PASTED}], thinking=False)))
        self.assertEqual(pasted["prompt_tokens"], len(thinking_on))
        with open(self.history) as f:
            entries = [json.loads(line) for line in f]
        self.assertEqual(entries, [EDITED, "/set temperature 0.7", "/set top_p 1.5", "/set", "/set temperature 0",
                                   "/set think on", "/reset", PASTED])

        # A new session recalls the old one's lines: Up x8 is the edited line.
        t2 = self.session("two")
        t2.wait_prompt(1)
        t2.keys("Up")
        t2.wait(lambda s: s.rstrip().endswith("line two"), "the paste recalled")
        for _ in range(7):
            t2.keys("Up")
        t2.wait(lambda s: s.rstrip().endswith("> " + EDITED), "the first line recalled")
        t2.keys("Enter")
        t2.wait_prompt(2)
        t2.keys("C-d")
        (again,) = self.report(t2, "two")
        self.assertEqual(again["prompt_tokens"], first["prompt_tokens"])
        self.assertEqual(again["response"], first["response"])


if __name__ == "__main__":
    require(shutil.which("tmux"), "tmux is not installed (scripts/install-deps.sh --tests)")
    main()
