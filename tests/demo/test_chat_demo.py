#!/usr/bin/env python3
"""The bundled demo model can chat (docs/demo-model.md, "Chat"; docs/chat.md).

    /usr/bin/python3 tests/demo/test_chat_demo.py [-v]      (K3_BIN_DIR: default build/bin)

- train/chat_data.py renders conversations exactly as k3-tokenizer does (the ids the model
  was fine-tuned on are the ids the engine sends), thinking on (each effort) and off;
- `k3-launch configs/demo.toml --chat` with the demo model: every greedy reply to the prompts
  below ends by itself (<|end_of_msg|>, finish_reason "stop"), has a non-empty answer, and each
  turn after the first reuses the kept state. The config's `gen = 32` is for one-shot runs: it
  cuts no chat reply (docs/chat.md).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "k3-demo-tiny")
BIN = os.environ.get("K3_BIN_DIR", os.path.join(ROOT, "build", "bin"))
sys.path.insert(0, os.path.join(ROOT, "train"))
sys.path.insert(0, os.path.join(ROOT, "tests", "pipeline"))
import bpe_train  # noqa: E402
import chat_data  # noqa: E402
from proc_util import main, run_launch  # noqa: E402

USERS = ["Tell me a fortune.", "Hello!", "What is your name?", "Say something wise.", "How are you today?"]
LIMIT = 150  # the demo's replies are 20-120 ids
CONFIG_GEN = 32  # configs/demo.toml


def tokenizer_render(messages, thinking, effort):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for m in messages:
            f.write(json.dumps(m) + "\n")
    try:
        args = ["--no-think"] if not thinking else ["--thinking-effort", effort]
        p = subprocess.run([os.path.join(BIN, "k3-tokenizer"), "chat", "--vocab", MODEL, "--history", f.name, *args],
                           capture_output=True, text=True, check=True)
    finally:
        os.unlink(f.name)
    return [int(x) for x in p.stdout.replace("\n", "").split(",") if x]


class ChatDemo(unittest.TestCase):
    def test_renderer_matches_tokenizer(self):
        r = chat_data.Renderer(bpe_train.Tokenizer(MODEL))
        msgs = [{"role": "system", "content": "You are a fortune cookie."},
                {"role": "user", "content": "Tell me a joke."},
                {"role": "assistant", "content": "A day without sunshine is like night.\n\t\t-- Anon",
                 "reasoning_content": chat_data.reasoning_for("max", "Tell me a joke.")},
                {"role": "user", "content": "Another one, please."}]
        for thinking, effort in ((True, "low"), (True, "high"), (True, "max"), (False, "max")):
            ids, _ = r.render(msgs, thinking, effort, generation_prompt=True)
            self.assertEqual(ids, tokenizer_render(msgs, thinking, effort), (thinking, effort))

    def test_replies_end_by_themselves(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "chat.json")
            for flags in ([], ["--no-think"]):
                p = run_launch(os.path.join(ROOT, "configs", "demo.toml"), "--chat", "--quiet", *flags,
                               out=out, exe=os.path.join(BIN, "k3-launch"), input="\n".join(USERS) + "\n/quit\n",
                               timeout=600)
                self.assertEqual(p.returncode, 0, p.stderr[-2000:])
                turns = p.report["turns"]
                self.assertEqual(len(turns), len(USERS))
                for i, t in enumerate(turns):
                    self.assertEqual(t["finish_reason"], "stop", (flags, USERS[i], t))
                    self.assertLess(t["generated_tokens"], LIMIT, (flags, USERS[i], t))
                    self.assertTrue(t["response"].strip(), (flags, USERS[i], t))
                    self.assertEqual(t["reused_tokens"] > 0, i > 0, t)
                    if i > 0:  # all of the previous turn
                        self.assertEqual(t["reused_tokens"], turns[i - 1]["reused_tokens"] +
                                         turns[i - 1]["prompt_tokens"] + turns[i - 1]["generated_tokens"], t)
                longest = max(t["generated_tokens"] for t in turns)
                if not flags:  # thinking on: replies longer than the config's gen ended by themselves
                    self.assertGreater(longest, CONFIG_GEN, turns)


if __name__ == "__main__":
    main()
