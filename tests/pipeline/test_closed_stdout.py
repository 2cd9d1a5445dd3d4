"""Output to a closed pipe and stop signals end command-line modes with exit 5 and no error line
(docs/exit-codes.md: exit 5 is the one code for a requested stop in every binary).

- k3-launch --dry-run, --help and --version into a pipe whose reader is gone (`| head -1` that
  already left): exit 5, nothing on stderr (was: killed by SIGPIPE, shell status 141).
- k3-tokenizer encode / decode into such a pipe: exit 5, quiet.
- k3-compute --standalone into such a pipe: stops at the next safe point, exit 5, the --out
  report marked interrupted (was: killed by SIGPIPE).
- k3-tokenizer encode / decode waiting on their input, then SIGINT, SIGTERM or SIGHUP: exit 5
  (was: killed by the signal).
Environment: K3_BIN (directory with the binaries). Uses the demo model's tokenizer.
"""
import json
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import main, require  # noqa: E402

BIN = os.environ.get("K3_BIN", "")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "configs", "demo.toml")
VOCAB = os.path.join(ROOT, "models", "k3-demo-tiny")
TIMEOUT = 120


def run_into_closed_pipe(cmd, stdin_data=b""):
    """Runs cmd with stdout a pipe whose read end is already closed; returns (code, stderr)."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(cmd, input=stdin_data, stdout=w, stderr=subprocess.PIPE, timeout=TIMEOUT, cwd=ROOT)
    finally:
        os.close(w)
    return p.returncode, p.stderr.decode(errors="replace")


class ClosedStdout(unittest.TestCase):
    def tok(self, *args):
        return [os.path.join(BIN, "k3-tokenizer")] + list(args)

    def test_launch_dry_run_help_version(self):
        for args in (["--dry-run"], ["--help"], ["--version"]):
            with self.subTest(args=args):
                code, err = run_into_closed_pipe([os.path.join(BIN, "k3-launch"), DEMO] + args)
                self.assertEqual(code, 5, err)
                self.assertEqual(err, "")

    def test_launch_dry_run_into_head_in_a_shell(self):
        # The user's command line: the shell reports the pipeline's status with pipefail.
        r = subprocess.run(["bash", "-c", "set -o pipefail; \"$0\" \"$1\" --dry-run | (exec 0<&-; sleep 0.3)",
                            os.path.join(BIN, "k3-launch"), DEMO], capture_output=True, text=True,
                           timeout=TIMEOUT, cwd=ROOT)
        self.assertEqual(r.returncode, 5, r.stderr)
        self.assertEqual(r.stderr, "")

    def test_tokenizer_encode_decode(self):
        code, err = run_into_closed_pipe(self.tok("encode", "--vocab", VOCAB), b"hello world " * 1000)
        self.assertEqual(code, 5, err)
        self.assertEqual(err, "")
        code, err = run_into_closed_pipe(self.tok("decode", "--vocab", VOCAB, "--ids", ",".join(["300"] * 5000)))
        self.assertEqual(code, 5, err)
        self.assertEqual(err, "")

    def test_standalone_compute(self):
        out_json = os.path.join(os.environ.get("TMPDIR", "/tmp"), "k3-closed-stdout-%d.json" % os.getpid())
        try:
            code, err = run_into_closed_pipe([os.path.join(BIN, "k3-compute"), "--standalone", VOCAB, "--ids",
                                              "1,5,9", "--gen", "50", "--out", out_json])
            self.assertEqual(code, 5, err)
            self.assertNotIn("k3-compute:", err)  # no error line
            with open(out_json) as f:
                report = json.load(f)
            self.assertTrue(report["interrupted"])
            self.assertLess(len(report["generated_ids"]), 50)
        finally:
            if os.path.exists(out_json):
                os.remove(out_json)

    def test_tokenizer_stop_signals(self):
        cases = [self.tok("encode", "--vocab", VOCAB),  # reads stdin until EOF
                 self.tok("decode", "--vocab", VOCAB, "--ids-file", "/dev/stdin")]
        for cmd in cases:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                with self.subTest(mode=cmd[1], signal=sig.name):
                    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE)
                    time.sleep(0.5)  # the vocabulary is loaded; it waits for input
                    self.assertIsNone(p.poll(), "ended before the signal")
                    p.send_signal(sig)
                    out, err = p.communicate(timeout=TIMEOUT)
                    p.stdin.close()
                    self.assertEqual(p.returncode, 5, err.decode(errors="replace"))
                    self.assertEqual(out, b"")


if __name__ == "__main__":
    require(BIN and os.path.exists(os.path.join(VOCAB, "tiktoken.model")), "K3_BIN not set or the demo model is missing")
    main()
