#!/usr/bin/env python3
"""Find KOKKOS_LAMBDA / KOKKOS_CLASS_LAMBDA that nvcc rejects: inside a member function with private or
protected access, or inside a member of a class nested under `private:` / `protected:`.

nvcc rejects an extended __host__ __device__ lambda whose enclosing function has private or protected access
("The enclosing parent function ... cannot have private or protected access within its class"), and one whose
enclosing classes are not all public in their parents (CUDA C++ Programming Guide, extended lambda
restrictions). Such code builds on Serial/OpenMP/HIP and fails only in a CUDA build. This is a textual scan (no
compiler needed): it tracks class bodies by braces and the last access specifier seen at class level, and, in a
first pass over all files, the names of private/protected member functions declared in a class body, so that an
out-of-class definition `Class<T>::name(...) { ... KOKKOS_LAMBDA ... }` is found too.

Usage:  check_device_lambdas.py [DIR_OR_FILE ...]      (default: src include apps)
Prints file:line for each hit and exits 1 if any, 0 if none, 2 if a path does not exist.
Originally the team's /work/shared/tools/check_device_lambdas.py; ctest runs it (device_lambdas_*)."""
import re, sys, pathlib

ACCESS = re.compile(r'^\s*(public|private|protected)\s*:(?!:)')
# A class head: the last `class|struct Name` that is not a template parameter (`class T>`, `class T,`),
# followed by `final`, a base list, and the `{`.
CLASS = re.compile(r'\b(class|struct)\s+([A-Za-z_]\w*)(?!\s*[>,=])(?:\s+final)?\s*(?::[^;{()]*(?:\([^;{}]*\))?[^;{()]*)?\{$')
LAMBDA = re.compile(r'\bKOKKOS_(CLASS_)?LAMBDA\b')
# A member function declared or defined in a class body: `name(` not preceded by `.`/`->`/`::`.
MEMBER = re.compile(r'(?<![.\w>:])([A-Za-z_]\w*)\s*\(')
NOT_NAMES = {'if', 'for', 'while', 'switch', 'return', 'sizeof', 'decltype', 'static_assert', 'alignas',
             'noexcept', 'operator', 'explicit', 'requires', 'catch', 'throw', 'new', 'delete'}
# An out-of-class member definition head: Class<...>::name(
OUT_OF_CLASS = re.compile(r'\b([A-Za-z_]\w*)\s*(?:<[^;{}()<>]*(?:<[^;{}()<>]*>[^;{}()<>]*)*>)?\s*::\s*(~?[A-Za-z_]\w*)\s*\(')
# A GoogleTest test body: TEST(Suite, Name) { ... } defines a class whose TestBody() is private.
GTEST = re.compile(r'\b(TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)\s*\([^;{}()]*\)\s*\{$')
SUFFIXES = ('.cpp', '.hpp', '.h', '.cc', '.cxx', '.hh', '.inl')


def strip(text):
    """Comments and string/char literals removed, line structure kept."""
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    out = []
    for line in text.splitlines():
        line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
        line = re.sub(r"'(\\.|[^'\\])'", "' '", line)
        out.append(line.split('//', 1)[0])
    return out


def walk(lines, on_line, on_lambda=None):
    """Calls on_line(no, line, stack, depth) per line (before its braces), and on_lambda(no, stack) at each
    KOKKOS_LAMBDA with the stack as it is at that point of the line; stack entries are dicts
    {kind: 'class'|'block', depth, access, hidden, name, head}."""
    stack, depth, pending = [], 0, ''
    for no, line in enumerate(lines, 1):
        m = ACCESS.match(line)
        if m and stack and stack[-1]['kind'] == 'class' and depth == stack[-1]['depth'] + 1:
            stack[-1]['access'] = m.group(1)
        on_line(no, line, stack, depth)
        lambdas = {m.start() for m in LAMBDA.finditer(line)} if on_lambda else set()
        start = 0
        for i, ch in enumerate(line):
            if i in lambdas:
                on_lambda(no, stack)
            if ch == '{':
                head = (pending + ' ' + line[start:i + 1])[-600:]
                pending, start = '', i + 1
                cm = CLASS.search(head.rstrip())
                is_class = bool(cm) and not re.search(r'\benum\b', head)
                parent = stack[-1] if stack else None
                at_class_level = parent is not None and parent['kind'] == 'class' and depth == parent['depth'] + 1
                hidden = bool(parent and parent.get('hidden'))
                if is_class and at_class_level and parent['access'] in ('private', 'protected'):
                    hidden = True
                entry = {'kind': 'class' if is_class else 'block', 'depth': depth, 'hidden': hidden,
                         'access': 'private' if cm and cm.group(1) == 'class' else 'public',
                         'name': cm.group(2) if is_class else None, 'head': head}
                stack.append(entry)
                depth += 1
            elif ch in '};':
                if ch == '}':
                    depth -= 1
                    if stack:
                        stack.pop()
                pending, start = '', i + 1
        pending = (pending + ' ' + line[start:])[-600:]


def declarations(lines):
    """{(class name, member name)} of private/protected member functions declared in class bodies."""
    found = set()

    def on_line(no, line, stack, depth):
        if stack and stack[-1]['kind'] == 'class' and depth == stack[-1]['depth'] + 1 \
                and stack[-1]['access'] in ('private', 'protected'):
            for m in MEMBER.finditer(ACCESS.sub('', line)):
                if m.group(1) not in NOT_NAMES:
                    found.add((stack[-1]['name'], m.group(1)))
                    break
    walk(lines, on_line)
    return found


def scan(path, lines, hidden_members):
    hits = []

    def on_lambda(no, stack):
        cls_i = next((i for i in range(len(stack) - 1, -1, -1) if stack[i]['kind'] == 'class'), None)
        if cls_i is not None and cls_i + 1 < len(stack):  # inside a block of the class: a member's body
            cls = stack[cls_i]
            if cls['access'] in ('private', 'protected'):  # access changes only at class level: the member's
                hits.append(f'{path}:{no}: KOKKOS_LAMBDA in a {cls["access"]} member function of {cls["name"]} '
                            '(nvcc rejects it)')
                return
            if cls['hidden']:
                hits.append(f'{path}:{no}: KOKKOS_LAMBDA in a member of {cls["name"]}, a class nested under '
                            'private/protected access (nvcc rejects it)')
                return
        for block in stack:
            if block['kind'] == 'block' and GTEST.search(block['head']):
                hits.append(f'{path}:{no}: KOKKOS_LAMBDA in a GoogleTest TEST body (its TestBody is a private '
                            'member function: nvcc rejects it; launch the kernel from a free function)')
                return
            m = OUT_OF_CLASS.search(block['head']) if block['kind'] == 'block' else None
            if m and (m.group(1), m.group(2)) in hidden_members:
                hits.append(f'{path}:{no}: KOKKOS_LAMBDA in {m.group(1)}::{m.group(2)}, a private or protected '
                            'member function defined out of its class (nvcc rejects it)')
                return

    walk(lines, lambda *a: None, on_lambda)
    return sorted(set(hits), key=lambda h: int(h.split(':')[1]))


def main(argv):
    args = argv or ['src', 'include', 'apps']
    files = []
    for a in args:
        p = pathlib.Path(a)
        if not p.exists():
            print(f'check_device_lambdas: no such file or directory: {a}', file=sys.stderr)
            return 2
        files += [p] if p.is_file() else sorted(f for f in p.rglob('*') if f.suffix in SUFFIXES)
    texts = {f: strip(f.read_text(errors='replace')) for f in files}
    hidden = set()
    for lines in texts.values():
        hidden |= declarations(lines)
    hits = [h for f in files for h in scan(f, texts[f], hidden)]
    print('\n'.join(hits) if hits else f'no device lambda in a private or protected member function '
                                       f'({len(files)} files)')
    return 1 if hits else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
