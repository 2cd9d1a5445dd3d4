"""Chat conversations for the demo model in K3's XTML format (docs/tokenizer.md, "Chat template").

The assistant answers with fortunes (train/corpus.py) to a few user phrasings; every message ends
with <|end_of_msg|>, so a chat with the demo model shows turns that end by themselves. `render`
follows services/tokenizer/chat_template.cpp token for token (control segments with the specials
recognised, text segments without); tests/demo/test_chat_demo.py checks it against k3-tokenizer.
"""
import re

import numpy as np

import corpus

EFFORTS = ("low", "high", "max")
PHRASES = ["Tell me a fortune.", "Give me a fortune cookie.", "Say something wise.", "Tell me a joke.",
           "Do you have a quote for me?", "Hello!", "Hi", "What does the future hold?",
           "Another one, please.", "Cheer me up.", "Say something.", "hello", "tell me something funny",
           "What is the meaning of life?"]
SYSTEMS = ["You are a fortune cookie.", "You are a helpful assistant.", "Answer with a fortune.",
           "You are Kimi, a tiny demo model."]
MAX_REPLY_CHARS = 240


def effort_text(effort):
    return ("`thinking_effort` guides on how much to think in your thinking channel (not including "
            "the response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
            "Now the system is invoked with `thinking_effort=" + effort + "`.")


def reasoning_for(effort, user):
    if effort == "low":
        return ""
    if effort == "high":
        return "A fortune will do."
    return "The user wrote: " + user.splitlines()[0][:60] + "\nA fortune fits. I will pick one and stop."


class Renderer:
    """Token ids of XTML conversations with the demo vocabulary (bpe_train.Tokenizer)."""

    def __init__(self, tok):
        self.tok = tok
        self.special = {name: i for i, name in tok.specials.items()}
        self._split = re.compile("(" + "|".join(re.escape(n) for n in sorted(self.special, key=len, reverse=True)) + ")")
        self.eom = self.special["<|end_of_msg|>"]
        self.pad = self.special["[PAD]"]

    def control(self, s):
        ids = []
        for part in self._split.split(s):
            if part in self.special:
                ids.append(self.special[part])
            elif part:
                ids += self.tok.encode(part)
        return ids

    def text(self, s):
        return self.tok.encode(s) if s else []

    def render(self, messages, thinking, effort="max", generation_prompt=False):
        """(ids, mask): mask is 1 on the ids an assistant produces (after its generation prompt)."""
        ids, mask = [], []

        def add(x, m):
            ids.extend(x)
            mask.extend([m] * len(x))
        eom = "<|close|>message<|sep|><|end_of_msg|>"
        if thinking:
            add(self.control('<|open|>message role="system" type="thinking-effort"<|sep|>'), 0)
            add(self.text(effort_text(effort)), 0)
            add(self.control(eom), 0)
        for m in messages:
            add(self.control('<|open|>message role="' + m["role"] + '"<|sep|>'), 0)
            if m["role"] == "assistant":
                if thinking:
                    add(self.control("<|open|>think<|sep|>"), 0)
                    add(self.text(m.get("reasoning_content", "")), 1)
                    add(self.control("<|close|>think<|sep|>"), 1)
                    add(self.control("<|open|>response<|sep|>"), 1)
                else:
                    add(self.control("<|open|>response<|sep|>"), 0)
                add(self.text(m["content"]), 1)
                add(self.control("<|close|>response<|sep|>"), 1)
                add(self.control(eom), 1)
            else:
                add(self.text(m["content"]), 0)
                add(self.control(eom), 0)
        if generation_prompt:
            add(self.control('<|open|>message role="assistant"<|sep|>'), 0)
            add(self.control("<|open|>think<|sep|>" if thinking else "<|open|>response<|sep|>"), 0)
        return ids, mask


def replies(which):
    """Fortunes short enough for a reply; `which` = "train" or "valid" (corpus.py's every-20th split)."""
    items = corpus.fortunes()
    keep = [f for i, f in enumerate(items)
            if (i % corpus.HOLDOUT_EVERY == corpus.HOLDOUT_EVERY - 1) == (which == "valid")]
    return [f.rstrip() for f in keep if len(f.rstrip()) <= MAX_REPLY_CHARS]


def conversation(rng, pool, r, seq):
    """One random conversation (1-3 turns) that fits in `seq` ids: (ids, mask, thinking, effort)."""
    thinking = bool(rng.integers(2))
    effort = EFFORTS[rng.integers(len(EFFORTS))]
    msgs = []
    if rng.random() < 0.3:
        msgs.append({"role": "system", "content": SYSTEMS[rng.integers(len(SYSTEMS))]})
    best = None
    for _ in range(int(rng.integers(1, 4))):
        if rng.random() < 0.25:  # arbitrary user text: the first line of some fortune
            user = pool[rng.integers(len(pool))].splitlines()[0].strip()[:80] or "Hi"
        else:
            user = PHRASES[rng.integers(len(PHRASES))]
        reply = pool[rng.integers(len(pool))]
        trial = msgs + [{"role": "user", "content": user},
                        {"role": "assistant", "content": reply, "reasoning_content": reasoning_for(effort, user)}]
        ids, mask = r.render(trial, thinking, effort)
        if len(ids) > seq:
            break
        msgs, best = trial, (ids, mask)
    return best, thinking, effort


def batch(rng, pool, r, n, seq):
    """(ids [n, seq+1] int64, mask [n, seq] float32): conversations padded with [PAD], mask on targets."""
    x = np.full((n, seq + 1), r.pad, dtype=np.int64)
    m = np.zeros((n, seq), dtype=np.float32)
    i = 0
    while i < n:
        best, _, _ = conversation(rng, pool, r, seq + 1)
        if best is None:
            continue
        ids, mask = best
        x[i, :len(ids)] = ids
        m[i, :len(ids) - 1] = mask[1:]
        i += 1
    return x, m
