#!/usr/bin/python3
"""Writes a deterministic multi-megabyte mixed text for the parity test and benchmark.

    make_big_text.py OUT [--mb N]

Concatenates, in sorted order, files every Debian machine with our build dependencies has
(/usr/share/common-licenses, C headers under /usr/include) and the parity corpus repeated,
until about N MB (default 4)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402


def files_under(root, exts, recursive):
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            if os.path.isfile(p) and not os.path.islink(p) and (not exts or name.endswith(exts)):
                out.append(p)
        if not recursive:
            break
    return out


def main():
    if len(sys.argv) not in (2, 4):
        sys.exit("usage: make_big_text.py OUT [--mb N]")
    target = int(float(sys.argv[3]) * 1e6) if len(sys.argv) == 4 else 4_000_000
    mixed = b"\n".join(corpus.CASES.values())
    parts, total = [], 0
    sources = files_under("/usr/share/common-licenses", (), False) + files_under("/usr/include", (".h",), True)
    for i, path in enumerate(sources):
        if total >= target:
            break
        with open(path, "rb") as f:
            data = f.read()
        parts.append(data)
        total += len(data)
        if i % 3 == 0:  # interleave the multilingual corpus with the code and prose
            parts.append(mixed)
            total += len(mixed)
    if total < target // 2:
        sys.exit("make_big_text.py: not enough source text found")
    with open(sys.argv[1], "wb") as f:
        f.write(b"".join(parts))
    print(f"make_big_text.py: {total} bytes -> {sys.argv[1]}")


if __name__ == "__main__":
    main()
