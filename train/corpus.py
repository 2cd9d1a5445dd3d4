"""Training text for the demo model: the Debian `fortunes` / `fortunes-min` data files.

The files are fortune cookies separated by lines holding a single "%". We keep that format,
clean overstriking (char + backspace) and reduce to printable ASCII plus tab and newline, and
hold out every 20th fortune (5%) for validation. Deterministic: no randomness here.
"""
import os
import re
import unicodedata

FORTUNE_DIR = "/usr/share/games/fortunes"
# ASCII-art files would teach the model pictures, not prose.
EXCLUDE = {"art", "ascii-art"}
SEPARATOR = "\n%\n"
HOLDOUT_EVERY = 20


def source_files(directory=FORTUNE_DIR):
    if not os.path.isdir(directory):
        raise SystemExit(f"corpus: {directory} not found; install the Debian packages fortunes and fortunes-min")
    names = []
    for n in sorted(os.listdir(directory)):
        p = os.path.join(directory, n)
        if n.endswith((".dat", ".u8")) or n in EXCLUDE or os.path.islink(p) or not os.path.isfile(p):
            continue
        names.append(n)
    return names


def clean(text):
    text = re.sub(r".\x08", "", text)  # overstrike: "_\bx" / "x\bx" -> "x"
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if ch in "\t\n" or 32 <= ord(ch) < 127)
    return re.sub(r"[ \t]+\n", "\n", text)


def fortunes(directory=FORTUNE_DIR):
    """All fortunes in file order, cleaned, without separators."""
    out = []
    for n in source_files(directory):
        with open(os.path.join(directory, n), "rb") as f:
            raw = f.read().decode("utf-8", errors="replace")
        for piece in re.split(r"^%$", raw, flags=re.M):
            piece = clean(piece).strip("\n")
            if piece.strip():
                out.append(piece)
    return out


def split_text(directory=FORTUNE_DIR):
    """(train_text, valid_text): every 20th fortune is held out; fortunes end with the separator."""
    items = fortunes(directory)
    train = [f for i, f in enumerate(items) if i % HOLDOUT_EVERY != HOLDOUT_EVERY - 1]
    valid = [f for i, f in enumerate(items) if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1]
    join = lambda xs: "".join(x + SEPARATOR for x in xs)  # noqa: E731
    return join(train), join(valid)


if __name__ == "__main__":
    tr, va = split_text()
    print(f"{len(source_files())} files, train {len(tr)} chars, valid {len(va)} chars")
