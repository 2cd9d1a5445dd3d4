#!/usr/bin/env python3
"""ctest fixture: write the gate test data into K3_TESTDATA (argument 1).

    tiny/           tiny preset, seed 1234, release small-tensor dtypes   (the main gate model)
    tiny-s99-bf16/  tiny preset, seed 99, every small tensor BF16         (format variant)
    ops/            op cases from emit_op_cases.py (+ ops/index.json)
Other engineers' GoogleTests read the same folder through the K3_TESTDATA variable.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "..", "generator", "make_checkpoint.py")
OPS = os.path.join(HERE, "..", "reference", "emit_op_cases.py")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: setup_testdata.py TESTDATA_DIR")
    out = sys.argv[1]
    steps = [[GEN, os.path.join(out, "tiny"), "--preset", "tiny", "--seed", "1234"],
             [GEN, os.path.join(out, "tiny-s99-bf16"), "--preset", "tiny", "--seed", "99", "--small-dtype", "bf16"],
             [OPS, os.path.join(out, "ops")]]
    for s in steps:
        subprocess.run([sys.executable] + s, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
