"""Helpers the Python tests share (tests/pipeline, tests/server, tests/demo): the processes and
shared memory a k3-launch run leaves, free TCP ports, the last stderr line, and exit 77 for a skip."""
import glob
import os
import socket
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


def launch_report(argv, out_json, timeout):
    """Runs a k3-launch command line with `--out out_json` appended; returns (returncode, stdout,
    stderr, report or None, seconds, leftovers): leftovers lists the /dev/shm names and child
    pids the run left behind (both must be empty)."""
    import json
    import subprocess
    t0 = time.monotonic()
    p = subprocess.Popen(list(argv) + ["--out", out_json], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    o, e = p.communicate(timeout=timeout)
    took = time.monotonic() - t0
    leftovers = shm_names(p.pid) + children_of(p.pid)
    report = None
    if os.path.exists(out_json):
        with open(out_json) as f:
            report = json.load(f)
    return p.returncode, o.decode("utf-8", "replace"), e.decode("utf-8", "replace"), report, took, leftovers


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
    """unittest.main for a ctest script: exit 1 when a case failed or errored, 77 when any case
    or class was skipped (what it exists for did not all run), 0 when every case ran and passed."""
    import unittest
    prog = unittest.main(argv=[sys.argv[0]] + sys.argv[1:], exit=False)
    result = prog.result
    if not result.wasSuccessful():
        sys.exit(1)
    if result.skipped:
        for case, reason in result.skipped:
            print("SKIP: %s: %s" % (case.id(), reason), flush=True)
        sys.exit(SKIP)
    sys.exit(0)
