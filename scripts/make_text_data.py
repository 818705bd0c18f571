#!/usr/bin/env python3
"""Write the King James Bible as character-level token ids for data.format: tokens.

usage: scripts/make_text_data.py OUT_DIR [--text FILE] [--validation-every 10]

The text: Debian's bible-kjv-text (public domain), dumped by the `bible`
reader of package bible-kjv (`bible -l0 gen1:1-rev22:21`: one verse per line,
a heading line "Book N" before every chapter), 4,298,239 bytes of ASCII with
73 distinct characters; or FILE (any UTF-8 text) with --text.

Tokens are characters: the vocabulary is the sorted set of distinct
characters of the whole text, id = its index there. For the KJV every
character is one ASCII byte, so characters are bytes and bits per character
equals bits per byte; a byte-level vocabulary (256 ids) would only add 183
rows to the embedding and the head that no token ever uses.

Split: whole chapters (the text between two headings), every
--validation-every-th chapter (the 10th, 20th, ...) to validation, the others
to training, each part in text order: both parts span the whole book, so the
validation loss measures the same language the model trains on, and no
validation verse is inside a training sequence.

OUT_DIR gets kjv_train.h5 and kjv_validation.h5, each with
  tokens      (N)  uint8: the token ids of that part, in order
  vocabulary  (V)  uint8: the character (its byte) of each id
and attributes source, vocabulary_size, characters (docs/file-formats.md,
"Token data"). Writing the same text gives byte-identical datasets.
"""
import argparse
import os
import re
import subprocess
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:
    sys.exit(f"make_text_data.py: {e}; needs numpy and h5py "
             "(Debian: python3-h5py; try /usr/bin/python3 if python3 is another interpreter)")

BIBLE_RANGE = "gen1:1-rev22:21"


def kjv_text():
    try:
        out = subprocess.run(["bible", "-l0", BIBLE_RANGE], check=True, capture_output=True)
    except FileNotFoundError:
        sys.exit("make_text_data.py: the `bible` reader is missing: apt-get install bible-kjv "
                 "bible-kjv-text (scripts/setup.sh installs both)")
    except subprocess.CalledProcessError as e:
        sys.exit(f"make_text_data.py: `bible -l0 {BIBLE_RANGE}` failed: {e.stderr.decode()[:200]}")
    return out.stdout.decode("ascii"), f"bible-kjv-text (bible -l0 {BIBLE_RANGE})"


def chapters(text):
    """Split at the chapter headings (a line 'Book N' after an empty line)."""
    starts = [m.start() for m in re.finditer(r"\n(?=[1-3A-Z][A-Za-z ]* \d+\n)", text)]
    if not starts or starts[0] != 0:
        starts = [0] + starts
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def write(path, ids, vocab, source):
    with h5py.File(path, "w") as f:
        f.create_dataset("tokens", data=ids.astype(np.uint8))
        f.create_dataset("vocabulary", data=np.frombuffer(vocab.encode("latin-1"), dtype=np.uint8))
        f.attrs["source"] = source
        f.attrs["vocabulary_size"] = len(vocab)
        f.attrs["characters"] = len(ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--text", help="a UTF-8 text file instead of the KJV")
    ap.add_argument("--validation-every", type=int, default=10,
                    help="every N-th chapter goes to validation (default 10)")
    args = ap.parse_args()
    if args.validation_every < 2:
        sys.exit("make_text_data.py: --validation-every must be >= 2")
    if args.text:
        with open(args.text, encoding="utf-8") as f:
            text, source = f.read(), args.text
    else:
        text, source = kjv_text()
    vocab = "".join(sorted(set(text)))
    if len(vocab) > 256:
        sys.exit(f"make_text_data.py: {len(vocab)} distinct characters; the uint8 ids hold 256")
    if any(ord(c) > 255 for c in vocab):
        sys.exit("make_text_data.py: characters beyond Latin-1 cannot be stored in the uint8 vocabulary")
    index = np.zeros(256, dtype=np.uint8)
    for i, c in enumerate(vocab):
        index[ord(c)] = i
    parts = chapters(text)
    train = "".join(p for i, p in enumerate(parts) if (i + 1) % args.validation_every != 0)
    valid = "".join(p for i, p in enumerate(parts) if (i + 1) % args.validation_every == 0)
    if not valid:
        sys.exit(f"make_text_data.py: {len(parts)} chapters, none for validation "
                 f"(--validation-every {args.validation_every})")
    os.makedirs(args.out_dir, exist_ok=True)
    for name, part in (("kjv_train.h5", train), ("kjv_validation.h5", valid)):
        ids = index[np.frombuffer(part.encode("latin-1"), dtype=np.uint8)]
        write(os.path.join(args.out_dir, name), ids, vocab, source)
    print(f"make_text_data.py: {len(text)} characters, vocabulary {len(vocab)}, {len(parts)} chapters: "
          f"{len(train)} training and {len(valid)} validation characters in {args.out_dir}")


if __name__ == "__main__":
    main()
