"""Files a user names cannot be turned against them (issue 25, items 9, 10, 12, 13), with the real
binaries on the demo model:

- reads: a config, --prompt-file or --load-state that is /dev/zero, /dev/urandom or a FIFO with
  no writer is one error line at once (exit 2 for the config, 7 for the inputs), never an
  endless read or a hang; a prompt file over the limit is refused before it is read, an
  endless pipe as the prompt at the limit;
- writes: an output path (--out, --save-state, --dump-logits) that is a symlink, a FIFO or a
  device is refused (exit 4) before any service starts and is left as it was; a replaced file
  keeps its mode; no temporary is left next to it;
- keys: a CURVE secret key that other users can read, a key owned by another user and an
  --allow directory others can write to are refused (exit 7) by k3-expert-server and k3-launch.
Environment: K3_BIN (directory with the binaries).
"""
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import free_port, last_line, main, require, run_launch  # noqa: E402

BIN = os.environ.get("K3_BIN", "")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "configs", "demo.toml")
DEMO_MODEL = os.path.join(ROOT, "models", "k3-demo-tiny")
QUICK = 30  # seconds: every refusal here comes at once; a hang or an endless read hits this


def launch(*args, timeout=QUICK):
    return subprocess.run([os.path.join(BIN, "k3-launch")] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=timeout)


class UserFilesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="k3-user-files-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def fifo(self, name="fifo"):
        p = self.path(name)
        os.mkfifo(p, 0o600)
        return p

    def assert_one_line(self, r, code, *contains):
        self.assertEqual(r.returncode, code, r.stderr)
        line = last_line(r.stderr)
        self.assertTrue(line.startswith("k3-"), r.stderr)
        for c in contains:
            self.assertIn(c, line)
        self.assertEqual(r.stdout, "")
        self.assertNotIn("ready", r.stderr)  # refused before any service started
        return line

    def test_a_config_that_is_not_a_regular_file_is_exit_2(self):
        for path, kind in (("/dev/zero", "character device"), ("/dev/urandom", "character device"),
                           (self.fifo(), "FIFO"), (self.tmp, "directory")):
            with self.subTest(path):
                self.assert_one_line(launch(path), 2, path, kind)
        big = self.path("big.toml")
        with open(big, "w") as f:
            f.write("# " + "x" * (2 << 20) + "\n")
        self.assert_one_line(launch(big), 2, "above the limit")

    def test_inputs_that_are_not_regular_files_are_exit_7(self):
        # (A prompt may come from a pipe, `--prompt-file <(...)`: bounded by the limit below.)
        for flag, paths in (("--prompt-file", ["/dev/zero", "/dev/urandom"]),
                            ("--load-state", ["/dev/zero", self.fifo()])):
            for path in paths:
                with self.subTest(flag=flag, path=path):
                    extra = ["--ids", "1,2"] if flag == "--load-state" else []
                    self.assert_one_line(launch(DEMO, *extra, flag, path), 7, path)
        big = self.path("prompt.txt")
        with open(big, "w") as f:
            f.write("a" * ((16 << 20) + 1))
        self.assert_one_line(launch(DEMO, "--prompt-file", big), 7, "above the limit")
        # An endless pipe stops at the limit.
        r = subprocess.run("%s %s --prompt-file <(yes)" % (os.path.join(BIN, "k3-launch"), DEMO), shell=True,
                           executable="/bin/bash", capture_output=True, text=True, timeout=QUICK)
        self.assert_one_line(r, 7, "grew above the limit")

    def test_outputs_never_write_through_links_fifos_or_devices(self):
        victim = self.path("victim")
        with open(victim, "w") as f:
            f.write("precious")
        link = self.path("link")
        os.symlink(victim, link)
        fifo = self.fifo()
        for flag in ("--out", "--save-state", "--dump-logits"):
            for target, kind in ((link, "symbolic link"), (fifo, "FIFO"), ("/dev/null", "character device")):
                with self.subTest(flag=flag, target=target):
                    r = launch(DEMO, "--ids", "1,2,3", "--gen", "2", flag, target)
                    self.assert_one_line(r, 4, flag, target, kind, "not replaced")
        with open(victim) as f:
            self.assertEqual(f.read(), "precious")
        self.assertTrue(os.path.islink(link))
        self.assertTrue(stat.S_ISFIFO(os.stat(fifo).st_mode))
        self.assertTrue(stat.S_ISCHR(os.stat("/dev/null").st_mode))
        self.assertEqual(sorted(os.listdir(self.tmp)), ["fifo", "link", "victim"])  # no temporaries

    def test_a_replaced_output_keeps_its_mode_and_leaves_no_temporary(self):
        state, report = self.path("s.k3state"), self.path("r.json")
        for p in (state, report):
            with open(p, "w") as f:
                f.write("old")
            os.chmod(p, 0o600)
        r = run_launch(DEMO, "--ids", "1,2,3", "--gen", "2", "--save-state", state, out=None, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = launch(DEMO, "--ids", "1,2,3", "--gen", "2", "--out", report, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        for p in (state, report):
            st = os.stat(p)
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o600, p)
            self.assertEqual(st.st_uid, os.geteuid())
            self.assertGreater(st.st_size, 3, p)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["r.json", "s.k3state"])

    def keygen(self, name):
        r = subprocess.run([os.path.join(BIN, "k3-expert-server"), "keygen", self.path(name)], capture_output=True,
                           text=True, timeout=QUICK)
        self.assertEqual(r.returncode, 0, r.stderr)
        return self.path(name), self.path(name + "_secret")

    def server(self, key, allow):
        return subprocess.run([os.path.join(BIN, "k3-expert-server"), "--model", DEMO_MODEL, "--bind",
                               "tcp://127.0.0.1:%d" % free_port(), "--key", key, "--allow", allow],
                              capture_output=True, text=True, timeout=QUICK)

    def test_key_files_others_could_read_or_change_are_refused(self):
        _, server_secret = self.keygen("server")
        client, client_secret = self.keygen("client")
        allow = self.path("allow")
        os.mkdir(allow, 0o755)
        shutil.copy(client, allow)
        server_public = self.path("server")
        with self.subTest("secret key readable by others"):
            os.chmod(server_secret, 0o644)
            self.assert_one_line(self.server(server_secret, allow), 7, server_secret, "chmod 600")
            r = launch(DEMO, "--ids", "1", "--dry-run", "--expert-server", "tcp://127.0.0.1:1",
                       "--expert-server-key", server_public, "--client-key", server_secret)
            self.assertEqual(r.returncode, 7, r.stderr)
            self.assertIn("chmod 600", last_line(r.stderr))
            os.chmod(server_secret, 0o600)
        with self.subTest("allow directory writable by others"):
            os.chmod(allow, 0o777)
            self.assert_one_line(self.server(server_secret, allow), 7, allow, "writable by other users")
            os.chmod(allow, 0o755)
        with self.subTest("allowed certificate writable by others"):
            allowed = os.path.join(allow, "client")
            os.chmod(allowed, 0o666)
            self.assert_one_line(self.server(server_secret, allow), 7, allowed, "writable by other users")
            os.chmod(allowed, 0o644)
        if os.geteuid() == 0:
            with self.subTest("secret key owned by another user"):
                os.chown(server_secret, 65534, 65534)
                self.assert_one_line(self.server(server_secret, allow), 7, server_secret, "owned by another user")
                os.chown(server_secret, 0, 0)
        # The same files, once trusted, start the server (it stops on SIGTERM).
        p = subprocess.Popen([os.path.join(BIN, "k3-expert-server"), "--model", DEMO_MODEL, "--bind",
                              "tcp://127.0.0.1:%d" % free_port(), "--key", server_secret, "--allow", allow],
                             stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)
        self.assertIsNone(p.poll(), p.stderr.read() if p.poll() is not None else "")
        p.terminate()
        _, err = p.communicate(timeout=QUICK)
        self.assertEqual(p.returncode, 5, err)


if __name__ == "__main__":
    require(BIN and os.path.isdir(DEMO_MODEL), "K3_BIN not set or no demo model")
    main()
