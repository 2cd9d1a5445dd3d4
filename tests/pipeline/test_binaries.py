"""What every k3 binary shares: `--version` and the one-line error of main().

Every binary prints "<binary> <version>" for --version and exits 0, all with the same version,
the project's (K3_VERSION, from CMake). A service whose control endpoint cannot even be
connected ends with one line "<binary>: ..." and the usage code 2 instead of aborting on an
uncaught exception. Real processes, no model needed.
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
            "k3-tokenizer", "k3-disk-bench", "k3-bench-kernels", "k3-bench-membw", "k3-bench-hash"]


def run(args, timeout=30):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


class BinariesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not BIN or not os.path.isdir(BIN):
            raise unittest.SkipTest("K3_BIN not set")

    def test_version_everywhere(self):
        seen = {}
        for name in BINARIES:
            path = os.path.join(BIN, name)
            if not os.path.exists(path):
                continue  # not built in this configuration
            with self.subTest(binary=name):
                r = run([path, "--version"])
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
        cases = {
            "k3-trunk-reader": ["--pinned-arena", "a", "--ring-arena", "b"],
            "k3-expert-fetcher": ["--arena", "a"],
        }
        for name, extra in cases.items():
            with self.subTest(binary=name):
                r = run([os.path.join(BIN, name), "--model", "/nonexistent", "--control", "bogus://x",
                         "--bind", "inproc://x"] + extra)
                self.assertEqual(r.returncode, 2, r.stderr)
                lines = r.stderr.splitlines()
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertTrue(lines[0].startswith(name + ": --control bogus://x: "), lines[0])
        r = run([os.path.join(BIN, "k3-tokenizer"), "serve", "--vocab", "/nonexistent", "--control", "bogus://x",
                 "--bind", "inproc://x"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertTrue(r.stderr.startswith("k3-tokenizer: --control bogus://x: "), r.stderr)

    def test_errors_name_the_binary(self):
        # A k3::Error from inside main(): one line prefixed with the binary's own name.
        r = run([os.path.join(BIN, "k3-expert-server"), "--model", "/nonexistent", "--bind", "inproc://x"])
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertRegex(r.stderr, r"\Ak3-expert-server: /nonexistent: [^\n]*\n\Z")
        r = run([os.path.join(BIN, "k3-compute"), "--standalone", "/nonexistent", "--ids", "1,,2"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr, r"\Ak3-compute: --ids: '' [^\n]*\n\Z")


if __name__ == "__main__":
    sys.exit(unittest.main())
