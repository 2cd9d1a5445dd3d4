"""Helpers the Python tests share (tests/pipeline, tests/server, tests/demo): k3-launch runs, the
plan's floor, the processes and shared memory a run leaves, free TCP ports, the last stderr line,
and exit 77 for a skip."""
import collections
import glob
import json
import os
import re
import socket
import subprocess
import sys
import time


def shm_names(pid=None):
    """/dev/shm names of k3 runs (of launcher `pid`, or of any run)."""
    pat = "/dev/shm/k3-%s-*" % pid if pid else "/dev/shm/k3-*"
    return sorted(glob.glob(pat))


def children_of(pid):
    """Pids whose parent is `pid` (from /proc)."""
    out = []
    for d in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(d.split("/")[2]))
        except (OSError, IndexError, ValueError):
            pass
    return out


def exe_of(pid):
    """The file name of the executable `pid` runs ("" when it is gone)."""
    try:
        return os.path.basename(os.readlink("/proc/%d/exe" % pid))
    except OSError:
        return ""


def service_pids(launcher_pid):
    """{executable name: pid} of the launcher's children."""
    return {exe_of(c): c for c in children_of(launcher_pid) if exe_of(c)}


def service_pid(launcher_pid, exe_name, timeout=60):
    """Pid of the launcher's child running `exe_name`, waiting until it exists."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for c in children_of(launcher_pid):
            if exe_of(c) == exe_name:
                return c
        time.sleep(0.02)
    raise AssertionError("%s never started" % exe_name)


def alive(pid):
    """True while `pid` exists and is not a zombie (a zombie holds no memory or descriptors)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def free_port():
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def last_line(text):
    """The last non-blank line of `text` ("" if none)."""
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1] if lines else ""


def env_for_ptrace():
    """The environment for processes a test traces with strace or storms with signals.
    LeakSanitizer stops the world with ptrace at exit: under strace it fails (exit status 1),
    and a storm of signals can keep its stop-the-world from finishing (a sanitizer run hung at
    exit). A sanitizer build keeps AddressSanitizer there, without leak detection; Release
    builds ignore ASAN_OPTIONS."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    return env


# ---- k3-launch runs and the plan's floor ---------------------------------------------------------

def launcher(bin_dir=None):
    """The k3-launch binary of `bin_dir` (default: K3_BIN)."""
    return os.path.join(bin_dir if bin_dir is not None else os.environ.get("K3_BIN", ""), "k3-launch")


def start_launch(config, *args, out=None, exe=None, **popen):
    """Starts `k3-launch CONFIG ARGS [--out OUT]`, stdout and stderr piped unless `popen` says
    otherwise, text unless `text=False`; returns the Popen. `exe` replaces K3_BIN's k3-launch."""
    argv = [exe or launcher(), config] + [str(a) for a in args] + (["--out", out] if out else [])
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    popen.setdefault("text", True)
    if popen["text"]:
        popen.setdefault("errors", "replace")  # a token cut inside a UTF-8 character
    return subprocess.Popen(argv, **popen)


class Run(collections.namedtuple("Run", "returncode stdout stderr report seconds leftovers")):
    """A finished k3-launch run: its --out report (None without one), the seconds it took, and
    `leftovers`, the /dev/shm names and child pids it left behind (both must be empty)."""


def run_launch(config, *args, out=None, timeout=300, exe=None, input=None, **popen):
    """Runs `k3-launch CONFIG ARGS [--out OUT]` to its end, `input` (if given) on its stdin; a run
    still going after `timeout` seconds is killed and raises AssertionError with the end of its
    stderr. Returns a Run."""
    if out and os.path.exists(out):
        os.remove(out)
    if input is not None:
        popen["stdin"] = subprocess.PIPE
    t0 = time.monotonic()
    p = start_launch(config, *args, out=out, exe=exe, **popen)
    try:
        o, e = p.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        _, e = p.communicate()
        raise AssertionError("k3-launch timed out: %s" % e[-2000:])
    took = time.monotonic() - t0
    report = None
    if out and os.path.exists(out):
        with open(out) as f:
            report = json.load(f)
    return Run(p.returncode, o, e, report, took, shm_names(p.pid) + children_of(p.pid))


def floor_bytes(stderr):
    """The plan's floor in bytes from k3-launch's budget refusal ("budget X is below the floor
    of Y (N bytes) for context C; ...", exit 6)."""
    m = re.search(r"below the floor of [^(]*\((\d+) bytes\)", stderr)
    if not m:
        raise AssertionError("no plan floor in k3-launch's error: " + stderr[-2000:])
    return int(m.group(1))


def plan_floor(config, *extra, timeout=300, exe=None):
    """The plan's floor for CONFIG and flags `extra`: `--budget 1 --dry-run` must be refused
    (exit 6) naming it."""
    r = subprocess.run([exe or launcher(), config, "--budget", "1", "--dry-run"] + [str(a) for a in extra],
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 6:
        raise AssertionError("k3-launch --budget 1 --dry-run: exit %d, not 6: %s" % (r.returncode, r.stderr[-2000:]))
    return floor_bytes(r.stderr)


# ---- skips that ctest can see ------------------------------------------------------------------
# ctest reads only the exit status: unittest exits 0 after a skipped class or case, which ctest
# would list as Passed. Every test registered with SKIP_RETURN_CODE 77 runs through these two.
SKIP = 77


def require(ok, reason):
    """Exits 77 (ctest: Skipped) with `reason` unless `ok`; call it before main()."""
    if not ok:
        print("SKIP: " + reason, flush=True)
        sys.exit(SKIP)


def main():
    """unittest.main for a ctest script: exit 1 when a case failed or errored or none ran, 77 when
    any case or class was skipped (what it exists for did not all run), 0 when every case ran and
    passed."""
    import unittest
    prog = unittest.main(argv=[sys.argv[0]] + sys.argv[1:], exit=False)
    result = prog.result
    if not result.wasSuccessful():
        sys.exit(1)
    if result.skipped:
        for case, reason in result.skipped:
            print("SKIP: %s: %s" % (case.id(), reason), flush=True)
        sys.exit(SKIP)
    if result.testsRun == 0:
        print("FAIL: no test ran", flush=True)
        sys.exit(1)
    sys.exit(0)
