#!/usr/bin/env python3
"""A chat reply cut short is continued, not prefilled again (docs/chat.md, "A turn").

The demo model with the real services, input piped (no terminal). `--reply-limit` cuts every
reply: with thinking on inside the template's think/response boundary (the demo's reasoning is
empty), with --no-think inside the answer's text.

- the next turn still reuses the whole previous conversation (reused_tokens = the first turn's
  prompt + generated ids) and sends only the ids that close the cut message, as k3-tokenizer's
  rendering of the conversation closes it, and the new turn;
- /save then holds exactly the ids fed: the first rendering, the reply's ids as generated (the
  rendering's own ids up to the cut, or ids that decode to the answer's text), the closing, the new turn, the second reply; and that state is
  bit-identical (every KDA, conv and MLA-cache float) to a fresh one-shot prefill of the same
  ids. The comparison can fail: the same ids with one id changed give another state;
- /load of that file in a new session continues exactly as the first session did (the same
  third turn, reuse and reply);
- every turn and the one-shot run report first_token_seconds: > 0 and no more than the turn's
  (run's) seconds;
- /set temperature and seed reach compute: the reply is a one-shot run's with those flags on the
  same rendering (and not the greedy reply); a refused /set is one line and the chat goes on.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import main, run_launch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "bin"))
DEMO = os.path.join(ROOT, "models", "k3-demo-tiny")
CONFIG = os.path.join(ROOT, "configs", "demo.toml")
FIRST_SPECIAL = 4096  # the demo vocabulary's added tokens start here (docs/demo-model.md)
EOM, EOS = 4098, 4097
LIMIT = 6  # ids per reply: every demo reply is cut
USERS = ["Tell me a fortune.", "Another one, please.", "Thank you."]
HEADER = struct.Struct("<8sIIQQqqqQQq")  # docs/formats.md, "State file"


def tokenizer(*args):
    p = subprocess.run([os.path.join(BIN, "k3-tokenizer"), *args, "--vocab", DEMO], capture_output=True, check=True)
    return p.stdout


def render(history, thinking):
    """k3-tokenizer's rendering (effort max) of a history, with the generation prompt."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for m in history:
            f.write(json.dumps(m) + "\n")
    try:
        out = tokenizer("chat", "--history", f.name, *([] if thinking else ["--no-think"]))
    finally:
        os.unlink(f.name)
    return [int(x) for x in out.decode().replace("\n", "").split(",") if x]


def read_state(path):
    with open(path, "rb") as f:
        b = f.read()
    h = HEADER.unpack_from(b)
    n, floats, extra = h[7], h[8], h[9]
    ids_at = HEADER.size
    floats_at = ids_at + 4 * n
    extra_at = floats_at + 4 * floats
    return {"fields": h[:9] + h[10:],  # all but the extra's size
            "position": h[6],
            "ids": list(struct.unpack_from("<%di" % n, b, ids_at)),
            "floats": b[floats_at:extra_at],
            "extra": b[extra_at:extra_at + extra]}


def closing_of(message, generated):
    """The ids the template puts after `generated` to close a cut message, from the rendering of
    that message (its ids to its <|end_of_msg|>): after the text when the cut fell in text
    (text has no added ids, and is tokenized again in the rendering), else after the ids
    generated, which are then the rendering's own."""
    if all(i < FIRST_SPECIAL for i in generated):
        return message[next(i for i, x in enumerate(message) if x >= FIRST_SPECIAL):]
    assert message[:len(generated)] == generated, (message, generated)
    return message[len(generated):]


class ChatContinue(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="k3-chat-continue-")
        cls.sessions = {}
        for thinking in (True, False):
            state = os.path.join(cls.tmp.name, "chat-%d.k3state" % thinking)
            lines = USERS[:2] + ["/save " + state] + USERS[2:] + ["/quit"]
            cls.sessions[thinking] = (cls.chat("a%d" % thinking, lines, thinking), state)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def chat(cls, name, lines, thinking):
        out = os.path.join(cls.tmp.name, name + ".json")
        p = run_launch(CONFIG, "--chat", "--quiet", "--reply-limit", LIMIT, *([] if thinking else ["--no-think"]),
                       out=out, exe=os.path.join(BIN, "k3-launch"), input="\n".join(lines) + "\n", timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        return p

    def test_a_cut_reply_is_closed_and_continued(self):
        for thinking in (True, False):
            with self.subTest(thinking=thinking):
                self.check_continued(thinking)

    def check_continued(self, thinking):
        session, state = self.sessions[thinking]
        t1, t2, t3 = session.report["turns"]
        for t in (t1, t2, t3):
            self.assertEqual(t["finish_reason"], "length", t)
            self.assertEqual(t["generated_tokens"], LIMIT, t)
        self.assertEqual(bool(t1["response"]), not thinking, "the cut is meant to fall %s: %s" %
                         ("before the answer" if thinking else "in the answer", t1))
        h1 = [{"role": "user", "content": USERS[0]}]
        r1 = render(h1, thinking)
        self.assertEqual((t1["reused_tokens"], t1["prompt_tokens"]), (0, len(r1)))
        # Turn 2 on top of all of turn 1: the closing ids, then the new turn.
        self.assertEqual(t2["reused_tokens"], t1["prompt_tokens"] + t1["generated_tokens"])
        reply = {"role": "assistant", "content": t1["response"]}
        if thinking:
            reply["reasoning_content"] = t1["reasoning"]
        r2 = render(h1 + [reply, {"role": "user", "content": USERS[1]}], thinking)
        self.assertEqual(r2[:len(r1)], r1)
        message_end = r2.index(EOM, len(r1)) + 1
        new = r2[message_end:]

        # The saved state: exactly the ids fed, the last reply's last id not consumed yet.
        s = read_state(state)
        ids = s["ids"]
        g1 = ids[len(r1):len(r1) + LIMIT]
        self.assertEqual(ids[:len(r1)], r1)
        if not thinking:  # the ids of the answer's text, as generated
            self.assertEqual(tokenizer("decode", "--ids", ",".join(map(str, g1))).decode(errors="replace"),
                             t1["response"])
        closing = closing_of(r2[len(r1):message_end], g1)
        self.assertEqual(closing[-1], EOM)
        self.assertEqual(t2["prompt_tokens"], len(closing) + len(new))
        self.assertEqual(ids[len(r1) + LIMIT:len(ids) - LIMIT], closing + new)
        self.assertEqual(len(ids), t2["reused_tokens"] + t2["prompt_tokens"] + LIMIT)
        self.assertEqual(s["position"], len(ids) - 1)
        self.assertEqual(t3["reused_tokens"], len(ids))
        extra = json.loads(s["extra"])
        self.assertEqual(extra["k3_chat"], 2)
        self.assertTrue(extra["state_valid"])
        # ... and the ids that close the second reply, which turn 3 sent first.
        reply2 = {"role": "assistant", "content": t2["response"]}
        if thinking:
            reply2["reasoning_content"] = t2["reasoning"]
        r3 = render(h1 + [reply, {"role": "user", "content": USERS[1]}, reply2, {"role": "user", "content": USERS[2]}],
                    thinking)
        self.assertEqual(r3[:len(r2)], r2)
        message3_end = r3.index(EOM, len(r2)) + 1
        closing2 = closing_of(r3[len(r2):message3_end], ids[-LIMIT:])
        self.assertEqual(extra["closing"], closing2)
        self.assertEqual(t3["prompt_tokens"], len(closing2) + len(r3[message3_end:]))

        # A fresh prefill of the same ids (the last one generated from it) gives the same state.
        fresh = self.one_shot("fresh-%d" % thinking, ids[:-1])
        self.assertEqual(fresh["report"]["generated_ids"], ids[-1:])
        f = read_state(fresh["state"])
        self.assertEqual(f["ids"], ids)
        self.assertEqual(f["fields"], s["fields"])
        self.assertTrue(f["floats"] == s["floats"], "the continued state differs from a fresh prefill")
        # First-token time, one-shot: after the Generate's send, before its Done.
        rep = fresh["report"]
        self.assertGreater(rep["first_token_seconds"], 0)
        self.assertLessEqual(rep["first_token_seconds"], rep["run_seconds"])
        self.assertLessEqual(rep["first_token_seconds"], fresh["seconds"])
        self.assertIn(", first token %.3f s," % rep["first_token_seconds"], fresh["stderr"])
        if thinking:
            # The comparison sees one id changed (the closing's <|end_of_msg|> as [EOS]).
            at = len(r1) + LIMIT + len(closing) - 1
            self.assertEqual(ids[at], EOM)
            other = self.one_shot("other", ids[:at] + [EOS] + ids[at + 1:-1])
            self.assertNotEqual(read_state(other["state"])["floats"], s["floats"])

    def test_first_token_time_of_every_turn(self):
        for session, _ in self.sessions.values():
            for t in session.report["turns"]:
                self.assertGreater(t["first_token_seconds"], 0, t)
                self.assertLessEqual(t["first_token_seconds"], t["seconds"], t)
            self.assertLessEqual(sum(t["seconds"] for t in session.report["turns"]), session.seconds)
            self.assertEqual(session.stderr.count("[chat] %d tokens (--reply-limit %d reached)" % (LIMIT, LIMIT)), 3,
                             session.stderr)

    def test_load_continues_as_the_saved_session_did(self):
        session, state = self.sessions[True]
        b = self.chat("b", ["/load " + state, USERS[2], "/quit"], True)
        (b3,) = b.report["turns"]
        a3 = session.report["turns"][2]
        for k in ("prompt_tokens", "reused_tokens", "generated_tokens", "reasoning", "response", "finish_reason"):
            self.assertEqual(b3[k], a3[k], k)

    def test_set_sampling_reaches_compute(self):
        # /set temperature and seed (docs/chat.md "/set"): the reply is the one-shot run's with the
        # same flags on the same rendering (a draw depends on the seed and the position).
        lines = ["/set temperature 1.5", "/set seed 11", "/set top_p 0", USERS[0], "/quit"]
        p = self.chat("sampled", lines, False)
        (turn,) = p.report["turns"]
        self.assertIn("[chat] /set: --top-p 0: must be in (0, 1]", p.stderr)  # refused; the chat went on
        ids = render([{"role": "user", "content": USERS[0]}], False)
        out = os.path.join(self.tmp.name, "sampled-one-shot.json")
        ref = run_launch(CONFIG, "--ids", ",".join(map(str, ids)), "--gen", LIMIT, "--temperature", "1.5", "--seed", 11,
                         "--quiet", out=out, exe=os.path.join(BIN, "k3-launch"), timeout=300)
        self.assertEqual(ref.returncode, 0, ref.stderr[-3000:])
        self.assertEqual(turn["generated_tokens"], len(ref.report["generated_ids"]))
        self.assertEqual(turn["response"], tokenizer("decode", "--ids", ",".join(map(str, ref.report["generated_ids"]))).decode())
        greedy = self.sessions[False][0].report["turns"][0]  # the same first line, greedy
        self.assertNotEqual(turn["response"], greedy["response"])  # the settings changed the reply

    def one_shot(self, name, ids):
        out, state = os.path.join(self.tmp.name, name + ".json"), os.path.join(self.tmp.name, name + ".k3state")
        p = run_launch(CONFIG, "--ids", ",".join(map(str, ids)), "--gen", 1, "--save-state", state, out=out,
                       exe=os.path.join(BIN, "k3-launch"), timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        return {"report": p.report, "state": state, "seconds": p.seconds, "stderr": p.stderr}


if __name__ == "__main__":
    main()
