#!/usr/bin/python3
"""Writes a deterministic multi-megabyte mixed text for the parity test and benchmark.

    make_big_text.py OUT [--mb N] [--kind mixed|python|nonlatin]

mixed (default): concatenates, in sorted order, files every Debian machine with our build
dependencies has (/usr/share/common-licenses, C headers under /usr/include) and the parity
corpus repeated, until about N MB (default 4).
python: the Python standard library's sources (/usr/lib/python3.*/**/*.py, sorted), cut at
N MB: ASCII code, the benchmark's "code" text.
nonlatin: the vim tutor translations in Bulgarian, Greek, Japanese, Korean, Russian,
Ukrainian, Vietnamese and Chinese (package vim-runtime; ~0.4 MB, not repeated), or without
them the parity corpus' non-Latin cases repeated to 0.4 MB."""
import glob
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


NONLATIN_TUTORS = ["bg", "el", "ja", "ko", "ru", "uk", "vi", "zh_cn", "zh_tw"]
NONLATIN_CASES = ["han", "han_mixed", "japanese", "korean", "cyrillic", "arabic", "greek"]


def python_text(target):
    roots = sorted(glob.glob("/usr/lib/python3.*"))
    if not roots:
        sys.exit("make_big_text.py: no /usr/lib/python3.* found")
    data = b"".join(open(p, "rb").read() for p in files_under(roots[-1], (".py",), True))
    return data[:target]


def nonlatin_text():
    paths = [f"/usr/share/vim/vim90/tutor/tutor.{t}.utf-8" for t in NONLATIN_TUTORS]
    if all(os.path.isfile(p) for p in paths):
        return b"".join(open(p, "rb").read() for p in paths)
    one = b"\n".join(corpus.CASES[c] for c in NONLATIN_CASES) + b"\n"
    return one * (400_000 // len(one))


def main():
    args = sys.argv[1:]
    kind = "mixed"
    if "--kind" in args:
        i = args.index("--kind")
        kind = args[i + 1]
        del args[i:i + 2]
    if len(args) not in (1, 3) or kind not in ("mixed", "python", "nonlatin"):
        sys.exit("usage: make_big_text.py OUT [--mb N] [--kind mixed|python|nonlatin]")
    target = int(float(args[2]) * 1e6) if len(args) == 3 else 4_000_000
    if kind != "mixed":
        data = python_text(target) if kind == "python" else nonlatin_text()
        with open(args[0], "wb") as f:
            f.write(data)
        print(f"make_big_text.py: {len(data)} bytes ({kind}) -> {args[0]}")
        return
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
    with open(args[0], "wb") as f:
        f.write(b"".join(parts))
    print(f"make_big_text.py: {total} bytes -> {args[0]}")


if __name__ == "__main__":
    main()
