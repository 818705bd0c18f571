#!/usr/bin/env python3
"""ctest device_lambdas: scripts/check_device_lambdas.py flags exactly the known-bad fixture's marked lines
(so the check cannot silently pass), nothing in the known-good fixture, and nothing in src/ include/ apps/ perf/
tests/ (so CI fails on a new KOKKOS_LAMBDA that nvcc would reject). Usage: test_check_device_lambdas.py SOURCE_DIR"""
import pathlib, re, subprocess, sys

root = pathlib.Path(sys.argv[1])
checker = root / 'scripts' / 'check_device_lambdas.py'
fixtures = root / 'tests' / 'scripts' / 'device_lambdas'
passed = failed = 0


def check(name, ok, detail=''):
    global passed, failed
    print(('ok   ' if ok else 'FAIL ') + name + ('' if ok else ': ' + detail))
    passed, failed = passed + ok, failed + (not ok)


def run(*paths):
    r = subprocess.run([sys.executable, str(checker), *map(str, paths)], cwd=root, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


bad = fixtures / 'bad.cpp'
expected = {i for i, line in enumerate(bad.read_text().splitlines(), 1) if line.rstrip().endswith('// HIT')}
rc, out = run(bad)
flagged = {int(m.group(1)) for m in re.finditer(r'bad\.cpp:(\d+):', out)}
check('known-bad fixture exits 1', rc == 1, f'rc {rc}\n{out}')
check('known-bad fixture: exactly the HIT lines', flagged == expected and len(expected) == 6,
      f'expected {sorted(expected)}, flagged {sorted(flagged)}\n{out}')
check('out-of-class private definition named', 'OutOfClass::step' in out, out)
check('nested class under private named', 'Inner, a class nested' in out, out)

rc, out = run(fixtures / 'good.cpp')
check('known-good fixture exits 0', rc == 0 and 'no device lambda' in out, f'rc {rc}\n{out}')

# Every directory nvcc compiles in a CUDA build (the fixtures excepted).
rc, out = run(*(root / d for d in ('src', 'include', 'apps', 'perf', 'tests/common', 'tests/unit', 'tests/mpi',
                                   'tests/integration')))
check('src include apps perf tests: none', rc == 0, out)

rc, out = run(root / 'no-such-dir')
check('missing path exits 2 with its name', rc == 2 and 'no-such-dir' in out, f'rc {rc}\n{out}')

print(f'{passed} passed, {failed} failed')
sys.exit(1 if failed else 0)
