"""What every k3 binary shares: `--version`, `--help` and the one-line error of main().

Every binary prints "<binary> <version>" for --version and exits 0, all with the same version,
the project's (K3_VERSION, from CMake). A bad command line (an unknown flag, a value that is not
of the flag's type, a value missing) is exactly one stderr line "<binary>: <reason>", nothing on
stdout, and the usage code 2 (docs/exit-codes.md). A service whose control endpoint cannot even
be connected ends with one line "<binary>: ..." and exit 2 instead of aborting on an uncaught
exception. Real processes, no model needed; exit 77 (skipped) without K3_BIN.
Environment: K3_BIN (the build's bin directory), K3_VERSION.
"""
import os
import re
import subprocess
import sys
import unittest

BIN = os.environ.get("K3_BIN", "")
VERSION = os.environ.get("K3_VERSION", "")
BINARIES = ["k3-launch", "k3-compute", "k3-trunk-reader", "k3-expert-fetcher", "k3-expert-server", "k3-server", "k3-model",
            "k3-tokenizer", "k3-disk-bench", "k3-bench-kernels", "k3-bench-membw", "k3-bench-hash",
            "k3-bench-piece-read"]

# Per binary: a command line with a flag of a typed option given a value of the wrong type (or,
# for k3-tokenizer, whose options are all text, a value missing). Each is refused by the flag
# parser before the binary looks at anything else.
BAD_VALUE = {
    "k3-launch": ["configs/none.toml", "--gen", "many"],
    "k3-compute": ["--gen", "many"],
    "k3-trunk-reader": ["--inflight", "many"],
    "k3-expert-fetcher": ["--inflight", "many"],
    "k3-expert-server": ["--inflight", "many"],
    "k3-server": ["--max-batch", "many"],
    "k3-model": ["--threads", "many", "check", "/nonexistent"],
    "k3-tokenizer": ["encode", "--vocab"],
    "k3-disk-bench": ["/nonexistent", "--depth", "many"],
    "k3-bench-kernels": ["--reps", "many"],
    "k3-bench-membw": ["--gib", "many"],
    "k3-bench-hash": ["--repeats", "many"],
    "k3-bench-piece-read": ["--inflight", "many"],
}


def run(args, timeout=30):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def built(name):
    return os.path.exists(os.path.join(BIN, name))


class BinariesTest(unittest.TestCase):
    def assertUsageLine(self, name, r):
        """Exactly one stderr line naming the binary, nothing on stdout, exit 2."""
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertTrue(r.stderr.endswith("\n"), repr(r.stderr))
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith(name + ": "), lines[0])
        self.assertGreater(len(lines[0]), len(name) + 2, lines[0])  # a reason, not only the prefix

    def test_bad_flags_are_one_line_and_exit_2(self):
        self.assertEqual(set(BAD_VALUE), set(BINARIES))
        for name in BINARIES:
            if not built(name):
                continue  # not built in this configuration
            path = os.path.join(BIN, name)
            for args in (["--no-such-flag"], BAD_VALUE[name]):
                with self.subTest(binary=name, args=args):
                    self.assertUsageLine(name, run([path] + args))

    def test_help_everywhere(self):
        for name in BINARIES:
            if not built(name):
                continue
            with self.subTest(binary=name):
                r = run([os.path.join(BIN, name), "--help"])
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stderr, "")
                self.assertIn("--version", r.stdout)
                self.assertIn("--help", r.stdout)

    def test_version_everywhere(self):
        seen = {}
        for name in BINARIES:
            if not built(name):
                continue  # not built in this configuration
            with self.subTest(binary=name):
                r = run([os.path.join(BIN, name), "--version"])
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stderr, "")
                m = re.fullmatch(r"(\S+) (\d+\.\d+\.\d+\S*)\n", r.stdout)
                self.assertIsNotNone(m, repr(r.stdout))
                self.assertEqual(m.group(1), name)
                seen[name] = m.group(2)
        self.assertIn("k3-launch", seen)
        self.assertEqual(len(set(seen.values())), 1, seen)
        if VERSION:
            self.assertEqual(set(seen.values()), {VERSION})

    def test_unusable_control_endpoint_is_one_line(self):
        # Every service the launcher starts, with its required flags and a --control that
        # ZeroMQ cannot connect: refused before any Hello, as a bad flag.
        weights = ["--model", "/nonexistent", "--control", "bogus://x", "--bind", "inproc://x"]
        cases = {
            "k3-trunk-reader": weights + ["--pinned-arena", "a", "--ring-arena", "b"],
            "k3-expert-fetcher": weights + ["--arena", "a"],
            "k3-tokenizer": ["serve", "--vocab", "/nonexistent", "--bind", "inproc://x", "--control", "bogus://x"],
            "k3-compute": ["--pipeline", "--model", "/nonexistent", "--control", "bogus://x", "--endpoint", "inproc://e",
                           "--trunk", "inproc://t", "--experts", "inproc://x", "--pinned-arena", "a",
                           "--ring-arena", "b", "--experts-arena", "c"],
            "k3-server": ["--control", "bogus://x", "--compute", "inproc://c", "--tokenizer", "inproc://t",
                          "--listen", "127.0.0.1:0", "--model-name", "m", "--vocab-size", "100"],
        }
        for name, args in cases.items():
            with self.subTest(binary=name):
                r = run([os.path.join(BIN, name)] + args)
                self.assertUsageLine(name, r)
                self.assertTrue(r.stderr.startswith(name + ": --control bogus://x: "), r.stderr)

    def test_a_name_spelled_like_loopback_needs_a_key(self):
        # Judged by what it resolves to, not its spelling (issue 25, 4): the old prefix rule served
        # /v1/models without a key on whatever 127.0.0.1.attacker.example resolved to.
        server = [os.path.join(BIN, "k3-server"), "--control", "ipc://@k3-test-none", "--compute", "inproc://c",
                  "--tokenizer", "inproc://t", "--model-name", "m", "--vocab-size", "100", "--listen"]
        r = run(server + ["127.0.0.1.attacker.example:0"])
        self.assertUsageLine("k3-server", r)
        r = run(server + ["0.0.0.0:0"])
        self.assertUsageLine("k3-server", r)
        self.assertIn("--api-key", r.stderr)
        demo = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                            "configs", "demo.toml")
        r = run([os.path.join(BIN, "k3-launch"), demo, "--serve", "127.0.0.1.attacker.example:8080", "--dry-run"])
        self.assertUsageLine("k3-launch", r)
        r = run([os.path.join(BIN, "k3-launch"), demo, "--serve", "localhost:8080", "--dry-run"])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_errors_name_the_binary(self):
        # A k3::Error from inside main(): one line prefixed with the binary's own name.
        r = run([os.path.join(BIN, "k3-expert-server"), "--model", "/nonexistent", "--bind", "inproc://x"])
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertRegex(r.stderr, r"\Ak3-expert-server: /nonexistent: [^\n]*\n\Z")
        r = run([os.path.join(BIN, "k3-compute"), "--standalone", "/nonexistent", "--ids", "1,,2"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr, r"\Ak3-compute: --ids: '' [^\n]*\n\Z")


if __name__ == "__main__":
    if not BIN or not os.path.isdir(BIN):
        print("K3_BIN is not a directory: nothing to test (skipped)", file=sys.stderr)
        sys.exit(77)
    unittest.main()
