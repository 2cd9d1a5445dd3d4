"""A hard cgroup-v1 memory cap around one measured command (bench_floor.py, bench_floor_peaks.py).
Only the command and its children join the cgroup, never the caller; remove() takes it away."""
import os
import time

CGROOT = "/sys/fs/cgroup/memory"


def create(name, cap):
    """A fresh cgroup CGROOT/name limited to `cap` bytes; returns its path."""
    cg = os.path.join(CGROOT, name)
    os.mkdir(cg)
    with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
        f.write(str(cap))
    return cg


def wrap(cg, cmd):
    """cmd, made to join cg before it execs (so its whole tree is charged there)."""
    return ["sh", "-c", 'echo $$ > "$0"/cgroup.procs && exec "$@"', cg] + cmd


def max_usage(cg):
    with open(os.path.join(cg, "memory.max_usage_in_bytes")) as f:
        return int(f.read())


def oom_kills(cg):
    with open(os.path.join(cg, "memory.oom_control")) as f:
        for line in f:
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    return 0


def remove(cg, seconds=10):
    """rmdir, retried while the kernel still counts the exited tasks."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            os.rmdir(cg)
            return
        except OSError:
            time.sleep(0.05)
