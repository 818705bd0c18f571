#!/usr/bin/env python3
"""The commands of README.md and docs/*.md, tested (ctest docs_commands).

Every code block (indented by 4 spaces, or fenced with ```) of the Markdown
files is checked statically: each repository path it names (build/apps/...,
scripts/..., inputs/..., docs/..., tests/..., apps/..., include/...,
src/..., perf/...) must exist, in the build tree for build/apps/ and in the
source tree otherwise, so a renamed script, deck or program fails here.

A block preceded by the HTML comment (invisible in the rendered page)

    <!-- docs-test: run [ARGS][; a note] -->

is also run, line by line (backslash continuations joined, `# comments`
dropped), by bash in a scratch folder that links inputs/, scripts/, docs/,
tests/ to the source tree and build/ to the build tree; ARGS (e.g.
`--set data.train_limit=256 --set training.epochs=1`) are appended to every
gpipe-train command of the block, so documented runs stay tiny. Blocks run
in file order in one scratch folder, so a later block may use an earlier
one's outputs (data, checkpoints). Every command must exit 0.

usage: docs_commands.py SOURCE_DIR BUILD_DIR [--list]
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

MARK = re.compile(r"^\s*<!--\s*docs-test:\s*run\b(.*?)-->\s*$")
PATH_TOKEN = re.compile(r"^(build/apps|scripts|inputs|docs|tests|apps|include|src|perf|cmake|spack)/[A-Za-z0-9_./+-]*$")


def blocks(path):
    """(line number, lines, run args or None) of each code block in `path`."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out = []
    i = 0
    mark = None
    previous_blank = True
    while i < len(lines):
        line = lines[i]
        m = MARK.match(line)
        if m:
            mark = m.group(1).split(";")[0].strip()  # "; text" after the arguments: a note
            i += 1
            continue
        if line.startswith("```"):
            start = i + 1
            j = start
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            language = line[3:].strip()
            if language in ("", "sh", "bash", "console", "shell"):
                out.append((start + 1, lines[start:j], mark))
            mark = None
            i = j + 1
            previous_blank = False
            continue
        if line.startswith("    ") and previous_blank and line.strip():
            start = i
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or
                                      (not lines[j].strip() and j + 1 < len(lines) and
                                       lines[j + 1].startswith("    "))):
                j += 1
            out.append((start + 1, [l[4:] for l in lines[start:j]], mark))
            mark = None
            i = j
            previous_blank = False
            continue
        if line.strip():
            mark = None if not MARK.match(line) else mark
        previous_blank = not line.strip()
        i += 1
    return out


def commands(block_lines):
    """The block's commands: continuations joined, comments and blanks dropped."""
    joined, current = [], ""
    for line in block_lines:
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        text = re.sub(r"\s+#\s.*$", "", current).strip()
        if text and not text.startswith("#"):
            joined.append(text)
        current = ""
    return joined


def stale_paths(block_lines, source, build):
    missing = []
    for line in block_lines:
        for raw in re.split(r"[\s`'\"(),;:=]+", line):
            token = raw.rstrip(".")
            if not PATH_TOKEN.match(token) or any(c in token for c in "{}*<>"):
                continue
            if token.startswith("build/"):
                ok = os.path.exists(os.path.join(build, token[len("build/"):]))
            else:
                ok = os.path.exists(os.path.join(source, token))
            if not ok:
                missing.append(token)
    return missing


def with_args(command, args):
    """`command` with `args` after each gpipe-train invocation's own arguments
    (before a pipe or `&&`)."""
    if not args or "gpipe-train" not in command:
        return command
    parts = re.split(r"(\s&&\s|\s\|\|\s|\s\|\s|;\s)", command)
    for k, part in enumerate(parts):
        if "gpipe-train" in part and "--check" not in part and "--help" not in part:
            parts[k] = part.rstrip() + " " + args
    return "".join(parts)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    source, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    listing = "--list" in sys.argv[3:]
    files = [os.path.join(source, "README.md")] + sorted(
        os.path.join(source, "docs", f) for f in os.listdir(os.path.join(source, "docs")) if f.endswith(".md"))
    passed = failed = 0
    to_run = []
    for path in files:
        rel = os.path.relpath(path, source)
        for line, block_lines, mark in blocks(path):
            missing = stale_paths(block_lines, source, build)
            if missing:
                failed += 1
                print(f"FAIL: {rel}:{line}: names {', '.join(sorted(set(missing)))}, which does not exist")
            else:
                passed += 1
            if mark is not None:
                to_run.append((rel, line, block_lines, mark))
    if listing:
        for rel, line, block_lines, mark in to_run:
            print(f"{rel}:{line}: run with [{mark}]:")
            for c in commands(block_lines):
                print("    " + with_args(c, mark))
        return 0
    scratch = tempfile.mkdtemp(prefix="gpipe_docs_")
    for name in ("inputs", "scripts", "docs", "tests", "apps", "include"):
        os.symlink(os.path.join(source, name), os.path.join(scratch, name))
    os.symlink(build, os.path.join(scratch, "build"))
    env = dict(os.environ)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"  # mpirun -n 3 on a 2-core machine
    env["OPENBLAS_NUM_THREADS"] = "1"
    env["MPLBACKEND"] = "Agg"
    # `python3` of the documented commands: the interpreter running this test
    # (ctest passes /usr/bin/python3, which has h5py and matplotlib).
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    for rel, line, block_lines, mark in to_run:
        for c in commands(block_lines):
            command = with_args(c, mark)
            start = time.time()
            r = subprocess.run(["bash", "-c", "set -o pipefail; " + command], cwd=scratch, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            took = time.time() - start
            if r.returncode != 0:
                failed += 1
                tail = "\n".join(r.stdout.splitlines()[-15:])
                print(f"FAIL: {rel}:{line}: exit {r.returncode}: {command}\n{tail}")
            else:
                passed += 1
                print(f"ok: {rel}:{line}: {command} ({took:.1f} s)")
    if not failed:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"(the commands ran in {scratch}, kept)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
