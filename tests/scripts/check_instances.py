#!/usr/bin/env python3
"""The execution-space contract, checked in the source (issue 25).

CellOptions::space / PassContext::space promise that every kernel and copy of
a cell runs on that instance. A Kokkos Tools callback cannot tell instances
apart with Debian's Kokkos 3.4 Serial: kernel-begin's devID is
device_id(space) = (device type << instance bits) + space.impl_instance_id()
(impl/Kokkos_Profiling_Interface.hpp:77-79), and Serial::impl_instance_id()
returns 0 for every instance (Kokkos_Serial.hpp:156). So the contract is
checked in the source instead: every execution policy and
deep_copy in src/ must be built from an instance, i.e.

  Kokkos::RangePolicy<...>(space, begin, end)      3 arguments, not 2
  Kokkos::MDRangePolicy<...>(space, {..}, {..})    first argument not a brace list
  Kokkos::TeamPolicy<...>(space, n, ...), RowPolicy(space, n, ...)
  Kokkos::deep_copy(space, dst, src)               3 arguments, not 2

A launch meant for the default instance (one-time work at construction, such
as initializing parameters before any step) carries the comment
"instance: default" on its line or one of the 4 lines above, with its reason.
Files not checked are listed in EXCLUDED below, each with its reason.

Usage: check_instances.py SOURCE_DIR   (prints each violation; exit 1 if any)
       check_instances.py --self-test   (the checker finds each kind in a sample)
"""
import pathlib
import re
import sys

# Files left out, each with why. Keep this list short and explicit.
EXCLUDED = {
    # Not a cell's work: timing of single layers before the cells exist, and
    # the host-side staging and gathers of the Pipeline outside any step.
    "src/model/cost.cpp": "layer timing at construction (balance: time), its own instance",
    "src/predict": "the performance model: no kernels of a cell",
}

PATTERNS = [
    ("RangePolicy", re.compile(r"(?<![A-Za-z_])(?:Kokkos::)?RangePolicy\s*<[^;(]*?>\s*\(")),
    ("MDRangePolicy", re.compile(r"(?:Kokkos::)?MDRangePolicy\s*<[^;(]*?>\s*\(")),
    ("TeamPolicy", re.compile(r"(?:Kokkos::)?TeamPolicy\s*(?:<[^;(]*?>)?\s*(?:[A-Za-z_]\w*\s*)?\(")),
    ("RowPolicy", re.compile(r"(?<![A-Za-z_:])RowPolicy\s*(?:[A-Za-z_]\w*\s*)?\(")),
    ("deep_copy", re.compile(r"Kokkos::deep_copy\s*\(")),
]


def arguments(text, start):
    """Top-level arguments of the call whose '(' is at text[start - 1]."""
    depth, args, current, i = 0, [], "", start
    while i < len(text):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                args.append(current.strip())
                return args
            depth -= 1
        elif c == "," and depth == 0:
            args.append(current.strip())
            current = ""
            i += 1
            continue
        current += c
        i += 1
    return None


def violation(kind, args):
    if args is None:
        return "unparsed call"
    if kind == "RangePolicy" and len(args) < 3:
        return "RangePolicy without an instance (2 arguments)"
    if kind == "MDRangePolicy" and args and args[0].startswith("{"):
        return "MDRangePolicy without an instance"
    if kind in ("TeamPolicy", "RowPolicy") and len(args) < 3:
        return f"{kind} without an instance"
    if kind == "deep_copy" and len(args) < 3:
        return "deep_copy without an instance (2 arguments)"
    return None


def marked(lines, line):
    """'instance: default' on this line or one of the 4 above."""
    return any("instance: default" in lines[i] for i in range(max(line - 4, 0), line + 1))


def excluded(rel):
    return any(rel == e or rel.startswith(e.rstrip("/") + "/") for e in EXCLUDED)


SAMPLE = """
void f(const PassContext& ctx, View v, View w, int n) {
  Kokkos::parallel_for("a", Kokkos::RangePolicy<ExecSpace>(0, n), KOKKOS_LAMBDA(int i) {});
  Kokkos::parallel_for("b", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>({0, 0}, {n, n}), L);
  Kokkos::parallel_for("c", RowPolicy(n, Kokkos::AUTO), L);
  Kokkos::parallel_for("d", TeamPolicy(n, Kokkos::AUTO), L);
  Kokkos::deep_copy(v, w);
  Kokkos::parallel_for("e", n, L);
  Kokkos::parallel_for("ok", Kokkos::RangePolicy<ExecSpace>(ctx.space, 0, n), L);
  Kokkos::deep_copy(ctx.space, v, w);
  RowPolicy rows(ctx.space, n, Kokkos::AUTO);
  Kokkos::parallel_for("ok", rows, L);
  // instance: default (a sample exception)
  Kokkos::deep_copy(v, w);
}
"""


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        (pathlib.Path(d) / "src").mkdir()
        (pathlib.Path(d) / "src" / "sample.cpp").write_text(SAMPLE)
        import io, contextlib
        out = io.StringIO()
        sys.argv = [sys.argv[0], d]
        with contextlib.redirect_stdout(out):
            status = main()
        lines = [l for l in out.getvalue().splitlines() if l.startswith("src/")]
        expected = {3: "RangePolicy", 4: "MDRangePolicy", 5: "RowPolicy", 6: "TeamPolicy",
                    7: "deep_copy", 8: "without a policy"}
        got = {int(l.split(":")[1]): l for l in lines}
        ok = status == 1 and sorted(got) == sorted(expected) and all(
            expected[k] in got[k] for k in expected)
        print(out.getvalue())
        print("self-test", "passed" if ok else "FAILED")
        return 0 if ok else 1


def main():
    if sys.argv[1] == "--self-test":
        return self_test()
    root = pathlib.Path(sys.argv[1])
    found = []
    checked = 0
    for path in sorted((root / "src").rglob("*")):
        if path.suffix not in (".cpp", ".hpp") or not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        if excluded(rel):
            continue
        checked += 1
        text = path.read_text()
        lines = text.splitlines()
        # A parallel_for / reduce / scan must take a policy (an instance's),
        # never a bare count (which runs on the default instance).
        for m in re.finditer(r"Kokkos::parallel_(?:for|reduce|scan)\s*\(", text):
            args = arguments(text, m.end()) or []
            policy = next((a for a in args[:2] if '"' not in a and a != "label"), "")
            named = re.fullmatch(r"[A-Za-z_]\w*", policy)
            ok = ("Policy" in policy or "Range" in policy or "row_teams" in policy or
                  (named and re.search(r"Policy(?:<[^;]*?>)?\s+" + policy + r"\s*[({]", text)))
            line = text.count("\n", 0, m.start())
            if not ok and not marked(lines, line):
                found.append(f"{rel}:{line + 1}: parallel launch without a policy on an instance: "
                             f"{policy[:60]}")
        for kind, pattern in PATTERNS:
            for m in pattern.finditer(text):
                line = text.count("\n", 0, m.start())
                here = lines[line]
                if here.lstrip().startswith("//") or marked(lines, line):
                    continue
                if kind in ("RowPolicy", "TeamPolicy") and (
                        re.match(r"\s*using\s", here) or re.search(r"Policy\s+\w+\s*\(\s*const\s", here)):
                    continue  # an alias or a function returning a policy
                why = violation(kind, arguments(text, m.end()))
                if why:
                    found.append(f"{rel}:{line + 1}: {why}: {here.strip()}")
    for f in found:
        print(f)
    print(f"checked {checked} files under src/ ({len(EXCLUDED)} exclusions listed in {sys.argv[0]})")
    print(f"{len(found)} launches or copies not on an execution-space instance")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
