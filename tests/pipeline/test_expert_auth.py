"""CURVE authentication between k3-launch's fetcher and k3-expert-server (issue 15, item 1;
docs/pipeline.md "Remote expert server", docs/formats.md "CURVE certificates").

Real processes on 127.0.0.1: `k3-expert-server keygen` writes the certificates; a server with
`--key` and `--allow` serves a client whose key is allowed with the same ids as standalone
k3-compute (flags, then the TOML keys); a client with an unknown key, with no key, or with the
wrong server certificate is refused within seconds with a one-line reason (not after the 60 s
read timeout); a non-loopback bind without a key is exit 2; malformed certificates are exit 7.
Environment: K3_TESTDATA, K3_BIN (as test_pipeline.py).
"""
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_pipeline as tp  # noqa: E402
import test_remote_experts as tre  # noqa: E402
from proc_util import free_port, last_line, main, require, run_launch  # noqa: E402

SERVER = "k3-expert-server"


def server_bin():
    return os.path.join(tp.BIN, SERVER)


class ExpertAuthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The standalone ids, budgets and the plan's extra bytes for a remote run.
        tre.RemoteExpertsTest.setUpClass()
        cls.base = tp.PipelineTest
        cls.expected = cls.base.expected
        cls.extra = tre.RemoteExpertsTest.extra
        cls.tmp = tempfile.mkdtemp(prefix="k3-auth-test-")
        cls.keys = os.path.join(cls.tmp, "keys")
        cls.allowed = os.path.join(cls.tmp, "allowed")
        os.makedirs(cls.keys)
        os.makedirs(cls.allowed)
        for name in ("server", "client", "stranger"):
            r = subprocess.run([server_bin(), "keygen", os.path.join(cls.keys, name)], capture_output=True, text=True,
                               timeout=60)
            assert r.returncode == 0, r.stderr
        # The allow directory: the client's public certificate (and a secret file, to be skipped).
        for name in ("client", "client_secret"):
            with open(os.path.join(cls.keys, name)) as src, open(os.path.join(cls.allowed, name), "w") as dst:
                dst.write(src.read())

    def key(self, name):
        return os.path.join(self.keys, name)

    def start_server(self, port, extra=()):
        p = subprocess.Popen([server_bin(), "--model", tp.MODEL, "--bind", "tcp://127.0.0.1:%d" % port,
                              "--key", self.key("server_secret"), "--allow", self.allowed] + list(extra),
                             stderr=subprocess.PIPE, text=True)
        line = p.stderr.readline()
        self.assertIn("serving on", line)
        self.assertIn("CURVE keys", line)
        return p

    def stop_server(self, p):
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=tp.TIMEOUT)
        self.assertEqual(p.returncode, 5, err)
        return err

    def launch(self, port, keys=(), budget=None, toml=None):
        server = ["--expert-server", "tcp://127.0.0.1:%d" % port, "--no-verify"] if port else []  # keys only here
        r = run_launch(toml or self.base.toml, "--budget", (budget or self.base.budgets["stream"]) + self.extra,
                       "--ids", tp.IDS, *server, *keys, timeout=tp.TIMEOUT)
        self.assertEqual(r.leftovers, [], "shared memory or processes left behind")
        return r.returncode, r.stdout, r.stderr

    def test_keygen_writes_a_czmq_style_pair(self):
        pub, sec = self.key("client"), self.key("client_secret")
        self.assertEqual(stat.S_IMODE(os.stat(sec).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(pub).st_mode) & 0o077, 0o044)
        pub_lines = [l for l in open(pub).read().splitlines() if l and not l.startswith("#")]
        sec_lines = [l for l in open(sec).read().splitlines() if l and not l.startswith("#")]
        self.assertEqual(pub_lines[:2], ["metadata", "curve"])
        self.assertEqual(len(pub_lines), 3, pub_lines)
        self.assertRegex(pub_lines[2], r'^    public-key = "[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}"$')
        self.assertEqual(sec_lines[:3], pub_lines)
        self.assertRegex(sec_lines[3], r'^    secret-key = "[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}"$')
        # Two runs give two different keys; an existing certificate is never overwritten.
        self.assertNotEqual(open(self.key("server")).read().split("public-key")[1], pub_lines[2].split("public-key")[1])
        r = subprocess.run([server_bin(), "keygen", pub], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("exists", r.stderr)

    def test_allowed_key_gives_the_local_ids(self):
        port = free_port()
        server = self.start_server(port)
        try:
            rc, out, err = self.launch(port, ["--expert-server-key", self.key("server"),
                                              "--client-key", self.key("client_secret")])
            self.assertEqual(rc, 0, err[-3000:])
            self.assertEqual([int(x) for x in out.split()], self.expected)
            # The TOML keys (expert_server_key as a list, relative paths from the TOML's directory).
            toml = os.path.join(self.keys, "auth.toml")
            with open(toml, "w") as f:
                f.write('model = "%s"\nbudget = "1G"\nio = "pread"\ngen = %d\nthreads = 1\n'
                        'expert_server = "tcp://127.0.0.1:%d"\nexpert_server_key = ["server"]\n'
                        'client_key = "client_secret"\nno_verify = true\n' % (tp.MODEL, tp.GEN, port))
            rc, out, err = self.launch(None, budget=self.base.budgets["pinned"], toml=toml)
            self.assertEqual(rc, 0, err[-3000:])
            self.assertEqual([int(x) for x in out.split()], self.expected)
        finally:
            err = self.stop_server(server)
        stats = [l for l in err.splitlines() if l.startswith("[expert-server] stats:")][0]
        self.assertGreater(int(stats.split("stats: ")[1].split(" experts sent")[0]), 0, stats)
        self.assertIn(" 0 keys refused", stats)

    def test_unknown_or_missing_key_is_refused_fast(self):
        port = free_port()
        server = self.start_server(port)
        cases = [
            (["--expert-server-key", self.key("server"), "--client-key", self.key("stranger_secret")],
             "refused this client's key"),
            ([], "requires CURVE keys and this client has none"),
            (["--expert-server-key", self.key("stranger"), "--client-key", self.key("client_secret")],
             "--expert-server-key is not its public certificate"),
        ]
        try:
            for keys, reason in cases:
                with self.subTest(reason=reason):
                    t0 = time.time()
                    rc, out, err = self.launch(port, keys)
                    took = time.time() - t0
                    self.assertEqual(rc, 1, err[-3000:])
                    self.assertEqual(out.strip(), "")
                    line = last_line(err)
                    self.assertIn("expert server tcp://127.0.0.1:%d" % port, line)
                    self.assertIn(reason, line)
                    self.assertLess(took, 20, "refusal took %.1f s (the read timeout is 60 s)" % took)
        finally:
            err = self.stop_server(server)
        stats = [l for l in err.splitlines() if l.startswith("[expert-server] stats:")][0]
        self.assertIn(" 0 experts sent", stats)
        self.assertNotIn(" 0 keys refused", stats)

    def test_client_key_against_a_server_without_keys(self):
        port = free_port()
        p = subprocess.Popen([server_bin(), "--model", tp.MODEL, "--bind", "tcp://127.0.0.1:%d" % port],
                             stderr=subprocess.PIPE, text=True)
        self.assertIn("no authentication", p.stderr.readline())
        try:
            rc, _, err = self.launch(port, ["--expert-server-key", self.key("server"),
                                            "--client-key", self.key("client_secret")])
            self.assertEqual(rc, 1, err[-3000:])
            # The mismatch event or, when libzmq drops the connection first, the line naming every cause.
            self.assertIn("does not use CURVE keys", last_line(err))
        finally:
            self.stop_server(p)

    def test_a_refusing_server_among_several_is_dropped(self):
        # Two servers, one key for both; the second does not allow this client: it is dropped at
        # once and the first serves every expert, with the standalone ids.
        port, port2 = free_port(), free_port()
        good = self.start_server(port)
        other = subprocess.Popen([server_bin(), "--model", tp.MODEL, "--bind", "tcp://127.0.0.1:%d" % port2,
                                  "--key", self.key("server_secret"), "--allow", self.key("stranger")],
                                 stderr=subprocess.PIPE, text=True)
        self.assertIn("serving on", other.stderr.readline())
        try:
            rc, out, err = self.launch(port, ["--expert-server", "tcp://127.0.0.1:%d" % port2,
                                              "--expert-server-key", self.key("server"),
                                              "--client-key", self.key("client_secret")],
                                       budget=self.base.budgets["stream"] + self.extra)  # frames of two servers
            self.assertEqual(rc, 0, err[-3000:])
            self.assertEqual([int(x) for x in out.split()], self.expected)
            self.assertRegex(err, r"expert server tcp://127.0.0.1:%d refused this client .*dropped" % port2)
        finally:
            self.stop_server(good)
            self.stop_server(other)

    def test_public_bind_needs_a_key(self):
        port = free_port()
        for bind in ("tcp://*:%d" % port, "tcp://0.0.0.0:%d" % port):
            with self.subTest(bind=bind):
                r = subprocess.run([server_bin(), "--model", tp.MODEL, "--bind", bind], capture_output=True,
                                   text=True, timeout=60)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertIn("--insecure", r.stderr)
        p = subprocess.Popen([server_bin(), "--model", tp.MODEL, "--bind", "tcp://*:%d" % port, "--insecure"],
                             stderr=subprocess.PIPE, text=True)
        self.assertIn("serving on", p.stderr.readline())
        self.stop_server(p)
        # --key needs --allow, --allow needs --key.
        for extra in (["--key", self.key("server_secret")], ["--allow", self.allowed]):
            r = subprocess.run([server_bin(), "--model", tp.MODEL, "--bind", "tcp://127.0.0.1:%d" % port] + extra,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2, r.stderr)

    def test_malformed_certificates_are_exit_7(self):
        port = free_port()
        bad = os.path.join(self.tmp, "bad")
        os.makedirs(bad, exist_ok=True)
        good = open(self.key("client_secret")).read()
        pub_key = good.split('public-key = "')[1][:40]
        variants = {
            "short_key": good.replace(pub_key, pub_key[:39]),
            "unquoted": good.replace('"%s"' % pub_key, pub_key),
            "tab": good.replace("    public-key", "\tpublic-key"),
            "unknown_section": good.replace("metadata", "metadatum"),
            "unknown_property": good.replace("public-key", "publik-key"),
            "no_curve": "metadata\n",
            "binary": "\x00\x01\x02",
            "mismatched_pair": good.replace(pub_key, open(self.key("server")).read().split('public-key = "')[1][:40]),
        }
        for name, text in variants.items():
            path = os.path.join(bad, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o600)  # as a secret key must be: the refusal is then about its text
            with self.subTest(certificate=name):
                r = subprocess.run([server_bin(), "--model", tp.MODEL, "--bind", "tcp://127.0.0.1:%d" % port,
                                    "--key", path, "--allow", self.allowed], capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 7, r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertIn(path, r.stderr)
                r = subprocess.run([os.path.join(tp.BIN, "k3-launch"), self.base.toml, "--ids", tp.IDS, "--dry-run",
                                    "--expert-server", "tcp://127.0.0.1:%d" % port,
                                    "--expert-server-key", self.key("server"), "--client-key", path],
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 7, r.stderr)
                self.assertIn(path, last_line(r.stderr))
        # A public certificate where the secret one belongs; a missing file.
        for path in (self.key("server"), os.path.join(bad, "missing")):
            r = subprocess.run([server_bin(), "--model", tp.MODEL, "--bind", "tcp://127.0.0.1:%d" % port,
                                "--key", path, "--allow", self.allowed], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 7, r.stderr)
        # One key without the other is a usage error.
        r = subprocess.run([os.path.join(tp.BIN, "k3-launch"), self.base.toml, "--ids", tp.IDS, "--dry-run",
                            "--expert-server", "tcp://127.0.0.1:%d" % port, "--client-key", self.key("client_secret")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)


if __name__ == "__main__":
    require(tp.BIN and os.path.isdir(tp.MODEL), "K3_BIN / K3_TESTDATA not set")
    main()
