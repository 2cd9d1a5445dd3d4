"""Tool calls through k3-server and the official openai client (docs/server.md "Tool calls"):
a mixin of ServerTest (test_server.py), on its running demo server.

- Rendering: the prompt ids the server reports (`return_token_ids`) for a conversation with tool
  declarations, an assistant message with two calls, their results (sent in another order) and
  tool_choice, equal tools_reference.py's rendering from the cited template, encoded with the demo
  model's Python BPE.
- Parsing: the demo model emits no calls by itself, so the calls come from a prefill
  (`continue_final_message`, vLLM's field): the assistant message with its calls and the tools
  channel left open is the start of the reply, which compute continues; the server parses the
  channel from those ids and the generated ones alike, and answers tool_calls, streamed as
  OpenAI streams them (index, id and name, then argument fragments). A call of an undeclared
  tool is reported (tool_call_errors, its text in the content), never dropped.
"""
import json
import os

from tools_reference import Encoder, render

NAME = "k3-demo-tiny"
MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", NAME)
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city now.",
                                      "parameters": {"type": "object", "required": ["city"],
                                                     "properties": {"city": {"type": "string"},
                                                                    "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "search", "description": "Search the web.",
                                      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
]
CALLS = [{"id": "call_a", "type": "function",
          "function": {"name": "get_weather", "arguments": '{"city": "Rome", "days": 2, "opts": {"units": "C", "x": [1, 2.5]}}'}},
         {"id": "call_b", "type": "function", "function": {"name": "search", "arguments": '{"q": "rain & \\"umbrellas\\""}'}}]
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Rome? And search rain."},
    {"role": "assistant", "content": "Checking.", "reasoning_content": "Two tools.", "tool_calls": CALLS},
    {"role": "tool", "tool_call_id": "call_b", "content": "3 results"},
    {"role": "tool", "tool_call_id": "call_a", "content": "sunny, 24 C"},
]


class ToolCases:
    def chat(self, **params):
        params.setdefault("model", NAME)
        params.setdefault("temperature", 0)
        return self.srv.client("create", params=params)

    def test_tools_render_as_the_template(self):
        enc = Encoder(MODEL)
        # `auto` (no message) is the unit tests' (tokenizer.ToolTemplate.*): each prefill here costs seconds.
        for choice, thinking in (("required", True), ("none", False)):
            extra = {} if thinking else {"reasoning_effort": "none"}
            r = self.chat(messages=CONVERSATION, tools=TOOLS, tool_choice=choice, max_tokens=1, return_token_ids=True,
                          **extra)["response"]
            want = render(CONVERSATION, TOOLS, choice, thinking=thinking)
            self.assertEqual(r["prompt_token_ids"], enc.ids(want), (choice, thinking, want.text()))

    def prefill(self, calls, stream=False, tools=TOOLS):
        msgs = CONVERSATION[:2] + [{"role": "assistant", "content": "", "tool_calls": calls}]
        return msgs, self.chat(messages=msgs, tools=tools, continue_final_message=True, add_generation_prompt=False,
                               max_tokens=3, return_token_ids=True, stream=stream, seed=1)

    def test_tool_calls_from_the_reply(self):
        msgs, r = self.prefill(CALLS)
        r = r["response"]
        self.assertEqual(r["prompt_token_ids"], Encoder(MODEL).ids(render(msgs, TOOLS, continue_final=True)))
        m = r["choices"][0]["message"]
        got = [(c["type"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m["tool_calls"]]
        self.assertEqual(got, [("function", "get_weather", {"city": "Rome", "days": 2, "opts": {"units": "C", "x": [1, 2.5]}}),
                               ("function", "search", {"q": 'rain & "umbrellas"'})])
        self.assertEqual(len({c["id"] for c in m["tool_calls"]}), 2)
        self.assertTrue(all(c["id"].startswith("call_") for c in m["tool_calls"]))
        # What the demo model added after the calls is no call: reported, and kept in the content.
        for e in m.get("tool_call_errors", []):
            self.assertIn(e["text"], m["content"] or "")
        self.assertIn(r["choices"][0]["finish_reason"], ("tool_calls", "length", "stop"))
        # Streamed: each call's start (index, id, type, name, arguments ""), then its argument fragments.
        _, s = self.prefill(CALLS, stream=True)
        parts = [tc for c in s["chunks"] if c["choices"] for tc in (c["choices"][0]["delta"].get("tool_calls") or [])]
        starts = [p for p in parts if "id" in p]
        self.assertEqual([(p["index"], p["type"], p["function"]["name"], p["function"]["arguments"]) for p in starts],
                         [(0, "function", "get_weather", ""), (1, "function", "search", "")])
        self.assertTrue(all(set(p) == {"index", "function"} and set(p["function"]) == {"arguments"}
                            for p in parts if "id" not in p))
        self.assertGreater(len(parts), 4)  # fragments, not whole arguments
        for i, call in enumerate(m["tool_calls"]):
            self.assertEqual("".join(p["function"]["arguments"] for p in parts if p["index"] == i),
                             call["function"]["arguments"])
        self.assertEqual([c["choices"][0]["finish_reason"] for c in s["chunks"] if c["choices"]][-1],
                         r["choices"][0]["finish_reason"])

    def test_an_undeclared_call_is_reported(self):
        bad = [{"id": "call_x", "type": "function", "function": {"name": "rm_rf", "arguments": '{"path": "/"}'}}]
        _, r = self.prefill(bad, tools=TOOLS[1:])
        m = r["response"]["choices"][0]["message"]
        self.assertNotIn("tool_calls", m)
        errors = m["tool_call_errors"]
        self.assertIn('the tool "rm_rf" was not declared', errors[0]["error"])
        self.assertTrue(errors[0]["text"].startswith('<|open|>call tool="rm_rf" index="1"<|sep|>'), errors[0]["text"])
        self.assertIn(errors[0]["text"], m["content"])
        self.assertNotEqual(r["response"]["choices"][0]["finish_reason"], "tool_calls")

    def test_tool_fields_refused(self):
        e = self.srv.client("error", params={"model": NAME, "messages": CONVERSATION[:2], "tools": TOOLS,
                                             "tool_choice": {"type": "function", "function": {"name": "nope"}}})
        self.assertEqual(e["status"], 400)
        self.assertIn("does not declare", e["error"]["message"])
        e = self.srv.client("error", params={"model": NAME, "messages": CONVERSATION[:2] + [
            {"role": "tool", "tool_call_id": "call_zz", "content": "r"}], "tools": TOOLS})
        self.assertEqual(e["status"], 400)
        self.assertIn("tool message must follow an assistant message with tool_calls", e["error"]["message"])
