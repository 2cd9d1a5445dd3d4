"""Structured output end to end: `k3-launch --serve` on the demo model, the official openai npm
client (client.mjs) asking for response_format json_schema / json_object under sampling
(temperature 1, four seeds, batched). Every reply must parse and validate against the schema
by Python's jsonschema (an independent validator); the same requests without the constraint
must not all do so (the check can fail). Same seed: the same ids alone and in a batch. A forced
tool call (tool_choice named or required, the function strict) likewise: every call parses and
validates against its parameters, streamed too, and the same prompt with tool_choice auto does not
always. And the 400s: a keyword outside the subset, strict: true outside OpenAI's strict subset,
the fields k3 refuses, the contradicting options.
Environment as test_server.py; exit 77 without the openai package or jsonschema.
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_server import NAME, Server, request  # noqa: E402
from proc_util import main, require  # noqa: E402

try:
    import jsonschema
except ImportError:  # checked by require() below
    jsonschema = None

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "enum": ["f1", "f2"]},
        "mood": {"enum": ["happy", "sad", "wry"]},
        "year": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3},
        "ok": {"type": "boolean"},
        "note": {"anyOf": [{"type": "null"}, {"type": "number"}]},
        "who": {"type": "object", "properties": {"name": {"enum": ["Ann", "Bob"]}, "pet": {"type": ["boolean", "null"]}},
                "required": ["name"], "additionalProperties": False},
    },
    "required": ["id", "mood", "year", "tags", "ok", "who"],
    "additionalProperties": False,
}
# No free-text string: the demo model rarely closes one under sampling (its replies would end by
# max_tokens, finish_reason length). Short values: the demo's ids are mostly single bytes.
SEEDS = [1, 2, 3, 4]


def chat(seed, constrained=True, max_tokens=200, **extra):
    p = dict(model=NAME, messages=[{"role": "user", "content": "Describe a fortune as JSON."}], temperature=1,
             seed=seed, max_tokens=max_tokens, return_token_ids=True, **extra)
    if constrained:
        # strict false: SCHEMA has optional properties, which strict: true refuses (OpenAI's rule);
        # k3 constrains all the same.
        p["response_format"] = {"type": "json_schema", "json_schema": {"name": "fortune", "schema": SCHEMA, "strict": False}}
    return p


# A forced call's arguments (strict: OpenAI's subset: every property required, no others).
ARGS = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Oslo", "Lima"]}, "days": {"type": "integer"},
               "metric": {"type": "boolean"}, "hours": {"type": "array", "items": {"type": "integer"}, "maxItems": 2}},
    "required": ["city", "days", "metric", "hours"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "the weather", "parameters": ARGS,
                                           "strict": True}}]


def forced(seed, choice, max_tokens=200, tools=TOOLS):
    return dict(model=NAME, messages=[{"role": "user", "content": "Weather in Oslo?"}], temperature=1, seed=seed,
                max_tokens=max_tokens, return_token_ids=True, tools=tools, tool_choice=choice)


def valid_call(choice, name="get_weather"):
    calls = choice["message"].get("tool_calls") or []
    return (choice["finish_reason"] == "tool_calls" and len(calls) == 1 and calls[0]["function"]["name"] == name
            and validates(calls[0]["function"]["arguments"], ARGS))


def validates(text, schema):
    try:
        jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.FormatChecker())
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


class StructuredTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-structured-test-")
        cls.srv = Server(cls.tmp, ["--max-batch", "4"])

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_every_sampled_reply_validates_same_ids_alone_and_without_the_constraint_not(self):
        got = self.srv.client("concurrent", list=[chat(s) for s in SEEDS])
        texts = []
        for s, r in zip(SEEDS, got):
            self.assertIn("response", r, r)
            choice = r["response"]["choices"][0]
            texts.append(choice["message"]["content"])
            self.assertEqual(choice["finish_reason"], "stop", choice)
            self.assertTrue(validates(choice["message"]["content"], SCHEMA), "seed %d: %r" % (s, choice["message"]["content"]))
            self.assertIsNone(choice["message"].get("reasoning_content"))  # thinking is off for a constrained reply
        self.assertGreater(len(set(texts)), 1, "sampling gave one text for every seed")
        # Same seed, same ids: seed 3 alone gives what it gave in the batch of four.
        alone = self.srv.client("create", params=chat(3))["response"]["choices"][0]["token_ids"]
        self.assertEqual(alone, got[SEEDS.index(3)]["response"]["choices"][0]["token_ids"])
        free = self.srv.client("concurrent", list=[chat(s, constrained=False, max_tokens=24) for s in SEEDS])
        ok = [validates(r["response"]["choices"][0]["message"]["content"], SCHEMA) for r in free]
        self.assertFalse(all(ok), "the unconstrained demo model validated every time: the test cannot fail")

    def test_forced_call_always_parses_and_validates_same_ids_alone_and_not_without_the_constraint(self):
        named = {"type": "function", "function": {"name": "get_weather"}}
        got = self.srv.client("concurrent", list=[forced(s, named if s % 2 else "required") for s in SEEDS])
        args = []
        for s, r in zip(SEEDS, got):
            self.assertIn("response", r, r)
            choice = r["response"]["choices"][0]
            self.assertTrue(valid_call(choice), "seed %d: %r" % (s, choice))
            args.append(choice["message"]["tool_calls"][0]["function"]["arguments"])
        self.assertGreater(len(set(args)), 1, "sampling gave the same arguments for every seed")
        alone = self.srv.client("create", params=forced(2, "required"))["response"]["choices"][0]
        self.assertEqual(alone["token_ids"], got[SEEDS.index(2)]["response"]["choices"][0]["token_ids"])
        # Streamed: the deltas join to the same call.
        chunks = self.srv.client("create", params=dict(forced(3, named), stream=True))["chunks"]
        parts = [tc for c in chunks if c["choices"] for tc in (c["choices"][0]["delta"].get("tool_calls") or [])]
        self.assertEqual("".join(p["function"].get("arguments") or "" for p in parts), args[SEEDS.index(3)])
        self.assertEqual([c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1], "tool_calls")
        # Without the constraint (tool_choice auto, the same prompt otherwise) the demo model's calls do not all
        # parse and validate: this test can fail.
        tools = [dict(TOOLS[0], function=dict(TOOLS[0]["function"], strict=False))]
        free = self.srv.client("concurrent", list=[forced(s, "auto", max_tokens=24, tools=tools) for s in SEEDS])
        self.assertFalse(all(valid_call(r["response"]["choices"][0]) for r in free),
                         "the unconstrained demo model made a valid call every time: the test cannot fail")

    def test_streamed_completion(self):
        p = dict(model=NAME, prompt="A fortune as JSON:", temperature=1, seed=9, max_tokens=200, stream=True,
                 response_format={"type": "json_schema", "json_schema": {"name": "fortune", "schema": SCHEMA}})
        chunks = self.srv.client("create", params=p)["chunks"]
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        self.assertTrue(validates(text, SCHEMA), text)
        self.assertEqual([c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1], "stop")

    def test_refusals_name_the_field(self):
        def error(params):  # raw HTTP: one node process per request would cost more than the request
            status, body = request("POST", self.srv.base + "/v1/chat/completions", json.dumps(params).encode(),
                                   {"Content-Type": "application/json"})
            self.assertEqual(status, 400, body)
            return json.loads(body)["error"]["message"]
        bad = dict(SCHEMA, properties=dict(SCHEMA["properties"], title={"type": "string", "pattern": "^[A-Z]"}))
        p = chat(1)
        p["response_format"]["json_schema"]["schema"] = bad
        r = self.srv.client("error", params=p)  # the official client gets the 400 as an error object
        self.assertEqual(r["status"], 400, r)
        self.assertIn("'pattern' is not supported (at /properties/title)", r["error"]["message"])
        for field, value in [("functions", [{"name": "f"}]), ("guided_regex", "a+"), ("min_tokens", 5),
                             ("prompt_logprobs", 1), ("grammar", "root ::= x")]:
            self.assertIn("'%s' is not supported" % field, error(dict(chat(1, constrained=False), **{field: value})))
        self.assertIn("'stop' cannot be combined", error(chat(1, stop=["}"])))
        strict = chat(1)
        strict["response_format"]["json_schema"]["strict"] = True
        self.assertIn("strict: true needs every property in 'required' ('note' at the root is not)", error(strict))
        self.assertIn("'tools[0].function.strict': true needs this function's call forced", error(forced(1, "auto")))
        self.assertIn("turns thinking off", error(chat(1, reasoning_effort="high")))
        self.assertIn("'response_format.json_schema.extra' is not supported", error(
            dict(chat(1), response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}, "extra": 1}})))


if __name__ == "__main__":
    require(os.path.exists(os.path.join(HERE, "node_modules", "openai", "package.json")),
            "the openai npm package is not installed (tests/server/setup.sh)")
    require(jsonschema is not None, "python3-jsonschema is not installed (scripts/install-deps.sh --tests)")
    main()
