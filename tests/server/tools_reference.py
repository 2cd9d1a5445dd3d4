"""K3's chat template with tools, written for the tests from the sources docs/chat.md "Tool calls"
cites (the released encoder's order and texts as its ports and the technical report show them),
not from k3's C++: a conversation -> segments (control or text), each segment encoded on its own,
text with the demo model's Python BPE (train/bpe_train.py), control tokens by their ids.
"""
import json
import os
import sys

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(SOURCE, "train"))
import bpe_train  # noqa: E402

EFFORT = ("`thinking_effort` guides on how much to think in your thinking channel (not including the response "
          "channel), supported values include `low`, `medium`, `high`, and `max`.\nNow the system is invoked with "
          "`thinking_effort=%s`.")
CHOICE = {
    "required": "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.",
    "none": "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.",
}


class Segments:
    def __init__(self):
        self.items = []  # (is_control, text)

    def c(self, s):
        self.items.append((True, s))

    def t(self, s):
        if s:
            self.items.append((False, s))

    def open(self, tag, attrs=()):
        self.c("<|open|>")
        self.t(tag)
        for k, v in attrs:
            self.t(" " + k)
            self.t('="')
            self.t(str(v).replace("&", "&amp;").replace('"', "&quot;"))
            self.t('"')
        self.c("<|sep|>")

    def close(self, tag):
        self.c("<|close|>")
        self.t(tag)
        self.c("<|sep|>")

    def message(self, attrs, body):
        self.open("message", attrs)
        self.t(body)
        self.close("message")
        self.c("<|end_of_msg|>")

    def text(self):
        return "".join(s for _, s in self.items)


def _type(v):
    if isinstance(v, bool):
        return "boolean"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "object" if isinstance(v, dict) else "array"


def render(messages, tools=None, tool_choice=None, thinking=True, effort="max", continue_final=False):
    s = Segments()
    if tools:
        s.message([("role", "system"), ("type", "tool-declare")],
                  "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n" +
                  json.dumps(tools, ensure_ascii=False, separators=(",", ":"), sort_keys=True) + "\n```")
    if thinking:
        s.message([("role", "system"), ("type", "thinking-effort")], EFFORT % effort)
    calls, index = [], 0
    # A run of tool results is put in the order of the calls they answer.
    ordered = []
    for m in messages:
        if m["role"] == "tool" and ordered and ordered[-1][0] == "run":
            ordered[-1][1].append(m)
        elif m["role"] == "tool":
            ordered.append(("run", [m]))
        else:
            ordered.append(("one", m))
    for n, (kind, item) in enumerate(ordered):
        last = n == len(ordered) - 1
        if kind == "run":
            ids = [c["id"] for c in calls]
            for k, m in enumerate(sorted(item, key=lambda m: ids.index(m["tool_call_id"])), start=1):
                name = calls[ids.index(m["tool_call_id"])]["function"]["name"]
                s.message([("role", "tool"), ("tool", name), ("index", k)], m["content"])
            continue
        m = item
        if m["role"] != "assistant":
            s.message([("role", m["role"])], m["content"])
            continue
        calls = m.get("tool_calls") or []
        s.open("message", [("role", "assistant")])
        if thinking:
            s.open("think")
            s.t(m.get("reasoning_content") or "")
            s.close("think")
        s.open("response")
        s.t(m.get("content") or "")
        if continue_final and last and not calls:
            return s
        s.close("response")
        if calls:
            s.open("tools")
            for i, c in enumerate(calls, start=1):
                s.open("call", [("tool", c["function"]["name"]), ("index", i)])
                for k, v in json.loads(c["function"]["arguments"]).items():
                    s.open("argument", [("key", k), ("type", _type(v))])
                    s.t(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
                    s.close("argument")
                s.close("call")
            if continue_final and last:
                return s
            s.close("tools")
        s.close("message")
        s.c("<|end_of_msg|>")
    if tool_choice in CHOICE:
        s.message([("role", "system"), ("type", "tool-choice")], CHOICE[tool_choice])
    s.open("message", [("role", "assistant")])
    s.open("think" if thinking else "response")
    return s


class Encoder:
    def __init__(self, model_dir):
        self.tok = bpe_train.Tokenizer(model_dir)
        self.special = {name: i for i, name in self.tok.specials.items()}

    def ids(self, segments):
        out = []
        for control, text in segments.items:
            out += [self.special[text]] if control else self.tok.encode(text)
        return out
