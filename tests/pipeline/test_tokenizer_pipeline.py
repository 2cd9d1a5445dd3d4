"""Pipeline tests with the tokenizer service: k3-launch runs k3-tokenizer serve next to the
weight services and compute, encodes text prompts through it and streams the generated text.

Checked against the k3-tokenizer CLI (encode/decode of the same text and ids) and the
standalone k3-compute (same ids), including a kill -9 of the tokenizer mid-run, and
malformed messages sent to the trunk reader's and the expert fetcher's sockets while a run
is under way (rejected, counted in the report's service stats, ids unchanged).
Environment: K3_TESTDATA (fixture dir with tiny/), K3_BIN (directory with the binaries).
"""
import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

BIN = os.environ.get("K3_BIN", "")
TESTDATA = os.environ.get("K3_TESTDATA", "")
MODEL = os.path.join(TESTDATA, "tiny")
PROMPT = "hello world, the quick brown fox\n"
GEN = 24
TIMEOUT = 300
SPECIALS = ["[BOS]", "[EOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>"]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import children_of, main, require, service_pid, shm_names, start_launch  # noqa: E402


def write_vocab(out_dir, vocab_size):
    """A tokenizer whose ids fill [0, vocab_size) exactly: 256 single bytes, two-byte merges,
    then the added tokens, so every id the tiny model can generate decodes."""
    os.makedirs(out_dir, exist_ok=True)
    n_merges = vocab_size - 256 - len(SPECIALS)
    letters = "etaoinshrdlucwmfygpbvkxqjz ,.\n"
    merges = []
    for a in letters:
        for b in letters:
            merges.append((a + b).encode())
            if len(merges) == n_merges:
                break
        if len(merges) == n_merges:
            break
    assert len(merges) == n_merges
    with open(os.path.join(out_dir, "tiktoken.model"), "w") as f:
        for b in range(256):
            f.write("%s %d\n" % (base64.b64encode(bytes([b])).decode(), b))
        for i, m in enumerate(merges):
            f.write("%s %d\n" % (base64.b64encode(m).decode(), 256 + i))
    first = 256 + n_merges
    added = {str(first + i): {"content": c, "special": True} for i, c in enumerate(SPECIALS)}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"added_tokens_decoder": added}, f)


def cli(args, stdin=None):
    r = subprocess.run([os.path.join(BIN, "k3-tokenizer")] + args, input=stdin, capture_output=True,
                       timeout=TIMEOUT)
    if r.returncode != 0:
        raise AssertionError("k3-tokenizer %s failed: %s" % (args, r.stderr.decode()))
    return r.stdout


def weight_endpoints(launcher_pid, timeout=60):
    """The trunk reader's and the expert fetcher's endpoints (abstract-namespace ipc://@...
    names, read from compute's command line), once both services listen on them."""
    compute = service_pid(launcher_pid, "k3-compute")
    deadline = time.time() + timeout
    argv = []
    while b"--experts" not in argv:  # right at exec the command line may not be there yet
        assert time.time() < deadline, "compute has no --experts on its command line"
        with open("/proc/%d/cmdline" % compute, "rb") as f:
            argv = f.read().split(b"\0")
    eps = {name: argv[argv.index(flag) + 1].decode() for name, flag in (("trunk", b"--trunk"), ("experts", b"--experts"))}
    while True:
        with open("/proc/net/unix") as f:
            names = {line.split()[-1] for line in f if len(line.split()) >= 8}
        if all(ep[len("ipc://"):] in names for ep in eps.values()):
            return eps
        assert time.time() < deadline, "no trunk/experts endpoints bound: %s" % eps
        time.sleep(0.005)


def send_malformed(endpoint):
    """Connects a DEALER to `endpoint` and sends junk frames, using libzmq through ctypes
    (pyzmq is not available to /usr/bin/python3). Returns the number of messages sent."""
    import ctypes
    import ctypes.util
    lib = ctypes.CDLL(ctypes.util.find_library("zmq") or "libzmq.so.5")
    lib.zmq_ctx_new.restype = ctypes.c_void_p
    lib.zmq_socket.restype = ctypes.c_void_p
    lib.zmq_socket.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.zmq_connect.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.zmq_send.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    lib.zmq_close.argtypes = [ctypes.c_void_p]
    lib.zmq_ctx_term.argtypes = [ctypes.c_void_p]
    lib.zmq_setsockopt.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    ZMQ_DEALER, ZMQ_SNDMORE, ZMQ_LINGER = 5, 2, 17
    ctx = lib.zmq_ctx_new()
    s = lib.zmq_socket(ctx, ZMQ_DEALER)
    linger = ctypes.c_int(2000)
    lib.zmq_setsockopt(s, ZMQ_LINGER, ctypes.byref(linger), 4)
    assert lib.zmq_connect(s, endpoint.encode()) == 0
    messages = [
        [b"garbage"],                                  # one frame
        [bytes([2, 1]), b"\x00" * 12],                 # weights kind, payload fails verification
        [bytes([9, 9]), b"\x10\x00\x00\x00K3WT" + b"\x00" * 12],  # unknown protocol
    ]
    for frames in messages:
        for i, fr in enumerate(frames):
            buf = ctypes.create_string_buffer(fr, len(fr))
            flags = ZMQ_SNDMORE if i + 1 < len(frames) else 0
            assert lib.zmq_send(s, buf, len(fr), flags) == len(fr)
    lib.zmq_close(s)  # linger delivers them
    lib.zmq_ctx_term(ctx)
    return len(messages)


class TokenizerPipelineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="k3-tokpipe-test-")
        with open(os.path.join(MODEL, "config.json")) as f:
            cfg = json.load(f)
        cls.vocab_size = cfg.get("text_config", cfg)["vocab_size"]
        cls.vocab = os.path.join(cls.tmp, "vocab")
        write_vocab(cls.vocab, cls.vocab_size)
        cls.toml = os.path.join(cls.tmp, "tiny-tok.toml")
        with open(cls.toml, "w") as f:
            f.write('model = "%s"\ntokenizer = "%s"\nbudget = "1G"\nio = "pread"\ngen = %d\nthreads = 1\n'
                    % (MODEL, cls.vocab, GEN))
        cls.toml_plain = os.path.join(cls.tmp, "tiny.toml")
        with open(cls.toml_plain, "w") as f:
            f.write('model = "%s"\nbudget = "1G"\nio = "pread"\ngen = %d\nthreads = 1\n' % (MODEL, GEN))
        # The prompt's ids according to the CLI, and the standalone engine's continuation.
        cls.prompt_ids = [int(x) for x in cli(["encode", "--vocab", cls.vocab], PROMPT.encode()).split(b",")]
        r = subprocess.run([os.path.join(BIN, "k3-compute"), "--standalone", MODEL, "--ids",
                            ",".join(map(str, cls.prompt_ids)), "--gen", str(GEN), "--threads", "1"],
                           capture_output=True, text=True, timeout=TIMEOUT)
        if r.returncode != 0:
            raise AssertionError("standalone k3-compute failed: " + r.stderr)
        cls.expected_ids = [int(x) for x in r.stdout.split()]
        cls.expected_text = cli(["decode", "--vocab", cls.vocab, "--ids", ",".join(map(str, cls.expected_ids))])

    def launch(self, toml, prompt_args, out, extra=()):
        # Unbuffered: tests read the first bytes, then communicate() reads the pipe directly.
        return start_launch(toml, "--out", out, *prompt_args, *extra, text=False, bufsize=0)

    def finish(self, p):
        try:
            out, err = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            self.fail("k3-launch timed out: " + err.decode(errors="replace")[-2000:])
        return out, err.decode(errors="replace")

    def assertClean(self, pid):
        self.assertEqual(shm_names(pid), [], "shared memory left behind")
        self.assertEqual(children_of(pid), [], "processes left behind")
        self.assertFalse(os.path.exists("/tmp/k3-run-%d" % pid), "run directory left behind")

    def assertTextEqual(self, json_text, raw):
        """JSON text vs raw bytes: equal where well-formed; U+FFFD runs may be split
        differently by the two replacement rules, so those are compared without them."""
        self.assertEqual(json_text.replace("\ufffd", ""), raw.decode("utf-8", "replace").replace("\ufffd", ""))
        self.assertEqual("\ufffd" in json_text, "\ufffd" in raw.decode("utf-8", "replace"))

    def check_text_run(self, out, err, p, report_path, restarted=False):
        self.assertClean(p.pid)
        self.assertEqual(p.returncode, 0, err[-3000:])
        with open(report_path) as f:
            rep = json.load(f)
        self.assertEqual(rep["prompt_ids"], self.prompt_ids)
        self.assertEqual(rep["generated_ids"], self.expected_ids)
        # stdout is exactly the generated text, byte for byte; the report's field is the same
        # text, with ill-formed UTF-8 (random ids) replaced by U+FFFD.
        self.assertEqual(out, self.expected_text)
        self.assertTextEqual(rep["generated_text"], self.expected_text)
        self.assertIn("tokenizer", rep["service_stats"])
        if not restarted:  # stats are the last tokenizer process's
            self.assertGreaterEqual(rep["service_stats"]["tokenizer"]["requests"], 2)
            self.assertEqual(rep["service_stats"]["tokenizer"]["encoded_bytes"], len(PROMPT.encode()))
        return rep

    def test_prompt_through_tokenizer_service(self):
        rep_path = os.path.join(self.tmp, "text.json")
        p = self.launch(self.toml, ["--prompt", PROMPT], rep_path)
        out, err = self.finish(p)
        rep = self.check_text_run(out, err, p, rep_path)
        self.assertIn("[launch] tokenizer ready", err)
        self.assertEqual(rep["restarts"]["tokenizer"], 0)
        self.assertEqual(rep["service_stats"]["tokenizer"]["rejected_messages"], 0)

    def test_prompt_file_same_as_prompt(self):
        path = os.path.join(self.tmp, "prompt.txt")
        with open(path, "wb") as f:
            f.write(PROMPT.encode())
        rep_path = os.path.join(self.tmp, "file.json")
        p = self.launch(self.toml, ["--prompt-file", path], rep_path)
        out, err = self.finish(p)
        self.check_text_run(out, err, p, rep_path)

    def run_ids(self, toml, report_name):
        """Runs --ids with the prompt's ids; checks a clean exit and the printed ids, returns
        the JSON report and stderr."""
        rep_path = os.path.join(self.tmp, report_name)
        p = self.launch(toml, ["--ids", ",".join(map(str, self.prompt_ids))], rep_path)
        out, err = self.finish(p)
        self.assertClean(p.pid)
        self.assertEqual(p.returncode, 0, err[-3000:])
        self.assertEqual([int(x) for x in out.split()], self.expected_ids)
        with open(rep_path) as f:
            return json.load(f), err

    def test_ids_with_tokenizer_print_ids_and_report_text(self):
        rep, _ = self.run_ids(self.toml, "ids.json")
        self.assertTextEqual(rep["generated_text"], self.expected_text)

    def test_ids_without_tokenizer(self):
        rep, err = self.run_ids(self.toml_plain, "plain.json")
        self.assertNotIn("generated_text", rep)
        self.assertNotIn("tokenizer", rep["restarts"])
        self.assertNotIn("k3-tokenizer", err)

    def test_prompt_without_tokenizer_is_usage_error(self):
        p = self.launch(self.toml_plain, ["--prompt", PROMPT], os.path.join(self.tmp, "x.json"))
        out, err = self.finish(p)
        self.assertEqual(p.returncode, 2, err)
        self.assertIn("tokenizer", err)
        self.assertClean(p.pid)

    def test_kill_tokenizer_mid_run(self):
        rep_path = os.path.join(self.tmp, "kill.json")
        p = self.launch(self.toml, ["--prompt", PROMPT], rep_path, extra=["--gen", str(GEN)])
        victim = service_pid(p.pid, "k3-tokenizer")
        first = p.stdout.read(1)  # generation (and the decode stream) is under way
        os.kill(victim, signal.SIGKILL)
        out, err = self.finish(p)
        self.assertIn("tokenizer killed by signal 9", err)
        rep = self.check_text_run(first + out, err, p, rep_path, restarted=True)
        self.assertEqual(rep["restarts"]["tokenizer"], 1)

    def test_malformed_messages_to_weight_services_while_running(self):
        rep_path = os.path.join(self.tmp, "malformed.json")
        ids = ",".join(map(str, self.prompt_ids))
        p = self.launch(self.toml_plain, ["--ids", ids], rep_path, extra=["--gen", str(GEN)])
        # Send as soon as both services have bound their endpoints: on a slow (sanitizer) build
        # the short run could otherwise end between the two sends.
        endpoints = weight_endpoints(p.pid)
        # Compute is held while the junk goes in, so the run cannot end (and the services report
        # their final counts) before both services have read it; a loaded machine once ended a
        # 24-token run first (trunk-reader rejected_messages 0).
        compute = service_pid(p.pid, "k3-compute")
        os.kill(compute, signal.SIGSTOP)
        sent = {}
        try:
            for name in ("trunk", "experts"):
                sent[name] = send_malformed(endpoints[name])
            time.sleep(1.0)  # both services poll their sockets within milliseconds
        finally:
            os.kill(compute, signal.SIGCONT)
        first = b""
        out, err = self.finish(p)
        self.assertClean(p.pid)
        self.assertEqual(p.returncode, 0, err[-3000:])
        self.assertEqual([int(x) for x in (first + out).split()], self.expected_ids)
        with open(rep_path) as f:
            rep = json.load(f)
        st = rep["service_stats"]
        self.assertEqual(st["trunk-reader"]["rejected_messages"], sent["trunk"], err[-3000:])
        self.assertEqual(st["expert-fetcher"]["rejected_messages"], sent["experts"], err[-3000:])


if __name__ == "__main__":
    require(BIN and os.path.isdir(MODEL), "K3_BIN / K3_TESTDATA not set")
    main()
