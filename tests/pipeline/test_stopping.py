"""Where generation stops (issue 13 item 1), with the real k3-launch and services on the demo
model (models/k3-demo-tiny) and its tokenizer, and k3-compute --standalone:

- Default end ids: a copy of the demo model whose config.json names as eos_token_id a token the
  greedy run emits at step k stops there (finish_reason "stop", the end id the last generated
  id); the same with a list eos_token_id; --ignore-eos (and TOML ignore_eos) runs to --gen.
  Standalone obeys the same default and flags.
- --stop-id N (repeatable) ends the run on N, the id kept in the ids, its text left out.
- --stop TEXT spanning a token boundary: stdout and generated_text end right before it (the
  part of it that arrived with the earlier token was held back, never printed), the ids are a
  prefix of the unstopped run that reaches past the match, finish_reason "stop", stop_text the
  string, and compute ended through a Cancel (its stats line says "ended by cancel") long
  before --gen. A held-back start of a stop that never completes is printed at the end.
Every run checks that no /dev/shm/k3-* name and no child process is left behind.
Environment: K3_BIN (directory with the binaries).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import main, require, run_launch  # noqa: E402

BIN = os.environ.get("K3_BIN", "")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO_MODEL = os.path.join(ROOT, "models", "k3-demo-tiny")
IDS = "1,5,9,200"
PROMPT = "The meaning of life is"
TIMEOUT = 300


def copy_model(src, dst, eos=None, tokenizer=True):
    """A copy of the demo model: shards linked, config.json (eos_token_id replaced) copied."""
    os.makedirs(dst)
    for name in os.listdir(src):
        if name == "config.json" or (not tokenizer and name in ("tiktoken.model", "tokenizer_config.json")):
            continue
        os.symlink(os.path.join(src, name), os.path.join(dst, name))
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    if eos is not None:
        cfg["eos_token_id"] = eos
        cfg["text_config"]["eos_token_id"] = eos
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f)


class Stopping(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-stopping-")
        cls.n = 0

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def toml(self, model, tokenizer=True, extra=""):
        Stopping.n += 1
        path = os.path.join(self.tmp, "c%d.toml" % Stopping.n)
        with open(path, "w") as f:
            f.write('model = "%s"\nbudget = "2G"\ngen = 12\n' % model)
            if tokenizer:
                f.write('tokenizer = "%s"\n' % model)
            f.write(extra)
        return path

    def launch(self, toml, *args):
        """Runs k3-launch; returns (rc, stdout, stderr, report)."""
        Stopping.n += 1
        r = run_launch(toml, *args, out=os.path.join(self.tmp, "r%d.json" % Stopping.n), timeout=TIMEOUT)
        self.assertEqual(r.leftovers, [], "shared memory or processes left behind")
        return r.returncode, r.stdout, r.stderr, r.report

    def decode(self, ids):
        r = subprocess.run([os.path.join(BIN, "k3-tokenizer"), "decode", "--vocab", DEMO_MODEL, "--ids",
                            ",".join(map(str, ids))], capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.decode("utf-8", "replace")

    def baseline(self, model, *args):
        rc, out, err, rep = self.launch(self.toml(model, tokenizer=False), "--ids", IDS, "--ignore-eos", *args)
        self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(rep["finish_reason"], "length")
        return rep["generated_ids"]

    @staticmethod
    def first_new(ids, start):
        """An index k >= start whose id does not occur before it."""
        for k in range(start, len(ids)):
            if ids[k] not in ids[:k]:
                return k
        raise AssertionError("no fresh id in %s" % ids)

    # ---- default end ids from config.json ----
    def test_config_eos_ends_the_run_and_ignore_eos_runs_to_gen(self):
        full = self.baseline(DEMO_MODEL)
        self.assertEqual(len(full), 12)
        k = self.first_new(full, 3)
        for eos, name in ((full[k], "int"), ([4351, full[k]], "list")):
            with self.subTest(eos=name):
                model = os.path.join(self.tmp, "eos-" + name)
                copy_model(DEMO_MODEL, model, eos=eos, tokenizer=False)
                rc, out, err, rep = self.launch(self.toml(model, tokenizer=False), "--ids", IDS)
                self.assertEqual(rc, 0, err[-2000:])
                self.assertEqual(rep["generated_ids"], full[:k + 1])  # the end id is the last id
                self.assertEqual([int(x) for x in out.split()], full[:k + 1])
                self.assertEqual(rep["finish_reason"], "stop")
                self.assertIn("(ended: stop)", err)
                rc, out, err, rep = self.launch(self.toml(model, tokenizer=False), "--ids", IDS, "--ignore-eos")
                self.assertEqual(rc, 0, err[-2000:])
                self.assertEqual(rep["generated_ids"], full)
                self.assertEqual(rep["finish_reason"], "length")
        # TOML ignore_eos, and standalone with the same checkpoint.
        model = os.path.join(self.tmp, "eos-int")
        rc, out, err, rep = self.launch(self.toml(model, tokenizer=False, extra="ignore_eos = true\n"), "--ids", IDS)
        self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(rep["generated_ids"], full)
        for flags, expect, reason in (([], full[:k + 1], "stop"), (["--ignore-eos"], full, "length")):
            out_json = os.path.join(self.tmp, "sa%d.json" % len(flags))
            r = subprocess.run([os.path.join(BIN, "k3-compute"), "--standalone", model, "--ids", IDS, "--gen", "12",
                                "--threads", "1", "--out", out_json] + flags, capture_output=True, timeout=TIMEOUT)
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            with open(out_json) as f:
                sa = json.load(f)
            self.assertEqual(sa["generated_ids"], expect)
            self.assertEqual(sa["finish_reason"], reason)

    # ---- the tokenizer's [EOS] and <|end_of_msg|> ----
    def test_tokenizer_end_ids_count_too(self):
        # The demo model does not emit its end tokens on plain text, so this checks the ids the
        # launcher sends as Generate.stop_ids (its "stop ids:" line): config.json's plus, with a
        # tokenizer, the ids tokenizer_config.json gives [EOS] and <|end_of_msg|>.
        with open(os.path.join(DEMO_MODEL, "tokenizer_config.json")) as f:
            added = json.load(f)["added_tokens_decoder"]
        ends = sorted(int(i) for i, t in added.items() if t["content"] in ("[EOS]", "<|end_of_msg|>"))
        self.assertEqual(len(ends), 2)
        model = os.path.join(self.tmp, "eos-pad")
        copy_model(DEMO_MODEL, model, eos=[4351, 4350])
        bare = os.path.join(self.tmp, "eos-pad-bare")
        copy_model(DEMO_MODEL, bare, eos=4351, tokenizer=False)
        for m, args, expect in ((model, [], sorted(ends + [4350, 4351])), (bare, [], [4351]),
                                (bare, ["--stop-id", "7"], [7, 4351]), (model, ["--ignore-eos"], None),
                                (model, ["--ignore-eos", "--stop-ids", "9,3"], [3, 9])):
            with self.subTest(model=os.path.basename(m), args=args):
                rc, out, err, rep = self.launch(self.toml(m, tokenizer=m == model), "--ids", IDS, "--gen", "1", *args)
                self.assertEqual(rc, 0, err[-2000:])
                line = [x for x in err.splitlines() if x.startswith("[launch] stop ids: ")]
                self.assertEqual(len(line), 1, err)
                listed = line[0].split(": ", 1)[1].split(" ")[0]
                self.assertEqual(listed, ",".join(map(str, expect)) if expect else "none")

    # ---- --stop-id ----
    def test_stop_id_is_kept_in_ids_and_left_out_of_text(self):
        rc, out, err, rep = self.launch(self.toml(DEMO_MODEL), "--prompt", PROMPT, "--gen", "16", "--ignore-eos")
        self.assertEqual(rc, 0, err[-2000:])
        full = rep["generated_ids"]
        k = self.first_new(full, 4)
        rc, out, err, rep = self.launch(self.toml(DEMO_MODEL), "--prompt", PROMPT, "--gen", "16", "--ignore-eos",
                                        "--stop-id", "4351", "--stop-id", str(full[k]))
        self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(rep["generated_ids"], full[:k + 1])
        self.assertEqual(rep["finish_reason"], "stop")
        self.assertEqual(rep["generated_text"], self.decode(full[:k]))
        self.assertEqual(out, rep["generated_text"])

    # ---- --stop TEXT ----
    def token_texts(self, ids):
        """Text of each prefix ids[:i], i = 0..len (byte-exact prefixes of the whole text)."""
        return [self.decode(ids[:i]) if i else "" for i in range(len(ids) + 1)]

    def test_stop_text_across_tokens_is_held_back_and_cancels_compute(self):
        gen = 400
        rc, out, err, rep = self.launch(self.toml(DEMO_MODEL), "--prompt", PROMPT, "--gen", "40", "--ignore-eos")
        self.assertEqual(rc, 0, err[-2000:])
        full, text = rep["generated_ids"], rep["generated_text"]
        self.assertEqual(out, text)
        prefixes = self.token_texts(full)
        # A stop string from the end of token i's text into token i+1's, at least 2 characters
        # on each side, whose first occurrence is there.
        stop, tok_end = None, None
        for i in range(2, len(full) - 1):
            a, b = prefixes[i], prefixes[i + 1]
            if not text.startswith(b) or len(a) < 2 or len(b) - len(a) < 2:
                continue
            cand = a[-2:] + b[len(a):len(a) + 2]
            if text.find(cand) == len(a) - 2 and "\ufffd" not in cand:
                stop, tok_end = cand, i + 1
                break
        self.assertIsNotNone(stop, "no token boundary to put a stop string across: %r" % text)
        at = text.find(stop)
        rc, out, err, rep = self.launch(self.toml(DEMO_MODEL), "--prompt", PROMPT, "--gen", str(gen),
                                        "--ignore-eos", "--stop", stop)
        self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(out, text[:at])  # the first half of the stop was never printed
        self.assertEqual(rep["generated_text"], text[:at])
        self.assertEqual(rep["finish_reason"], "stop")
        self.assertEqual(rep["stop_text"], stop)
        ids = rep["generated_ids"]
        self.assertGreaterEqual(len(ids), tok_end)  # ids keep what compute produced
        self.assertEqual(ids[:40], full[:len(ids[:40])])
        self.assertLess(len(ids), gen)  # compute stopped on the Cancel, not at --gen
        self.assertIn("ended by cancel", err)
        # The TOML's stop list works the same, and a second stop that never occurs is harmless.
        rc, out, err, rep = self.launch(
            self.toml(DEMO_MODEL, extra="stop = [%s, \"\\u0001never\"]\nignore_eos = true\n" % json.dumps(stop)),
            "--prompt", PROMPT, "--gen", str(gen))
        self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(out, text[:at])
        # A start of a stop string that never completes is held back, then printed in full.
        partial = text[-3:] + "\u0001"
        rc, out, err, rep = self.launch(self.toml(DEMO_MODEL), "--prompt", PROMPT, "--gen", "40", "--ignore-eos",
                                        "--stop", partial)
        self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(out, text)
        self.assertEqual(rep["generated_text"], text)
        self.assertEqual(rep["finish_reason"], "length")
        self.assertNotIn("stop_text", rep)

    def test_stop_text_with_an_id_prompt_keeps_ids_on_stdout(self):
        rc, out, err, rep = self.launch(self.toml(DEMO_MODEL), "--ids", IDS, "--gen", "30", "--ignore-eos")
        self.assertEqual(rc, 0, err[-2000:])
        text = rep["generated_text"]
        mid = len(text) // 2
        stop = text[mid:mid + 3]
        at = text.find(stop)
        rc, out, err, rep = self.launch(self.toml(DEMO_MODEL), "--ids", IDS, "--gen", "400", "--ignore-eos",
                                        "--stop", stop)
        self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(rep["generated_text"], text[:at])
        self.assertEqual([int(x) for x in out.split()], rep["generated_ids"])  # ids in, every id out
        self.assertEqual(rep["finish_reason"], "stop")

    def test_bad_stop_flags_are_usage_errors(self):
        for args in (["--stop", ""], ["--stop-id", "1,2"], ["--stop-id", "99999999"]):
            with self.subTest(args=args):
                rc, out, err, rep = self.launch(self.toml(DEMO_MODEL), "--ids", IDS, *args)
                self.assertEqual(rc, 2, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn("--stop", err)
        rc, out, err, rep = self.launch(self.toml(DEMO_MODEL, tokenizer=False), "--ids", IDS,
                                        "--stop", "x")
        # The TOML names no tokenizer, but the demo model directory holds one: --stop works.
        self.assertEqual(rc, 0, err[-2000:])
        bare = os.path.join(self.tmp, "no-tokenizer")
        copy_model(DEMO_MODEL, bare, tokenizer=False)
        rc, out, err, rep = self.launch(self.toml(bare, tokenizer=False), "--ids", IDS, "--stop", "x")
        self.assertEqual(rc, 2, err)
        self.assertIn("--stop needs a tokenizer", err)


if __name__ == "__main__":
    require(BIN and os.path.isdir(DEMO_MODEL), "K3_BIN not set or the demo model is missing")
    main()
