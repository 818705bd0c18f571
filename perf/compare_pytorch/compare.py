#!/usr/bin/python3
"""gpipe-kokkos against a PyTorch peer on CPU: samples/s of the deep MLP
(inputs/deep_mlp.yaml: 784 -> 8 x [Dense 1024, ReLU] -> Dense 10, float32,
batch 256, Adam lr 2e-4), side by side under the same conditions.

  1 process : PyTorch's plain loop (forward, cross-entropy, backward, Adam)
              vs gpipe-train on 1 rank (the deck's M: target >= 0.9x, issue 21; and
              M = 1: >= 1.05x); and PyTorch accumulating the deck's M
              micro-batches vs the deck's M (like for like: >= 1.05x).
  2 processes: a GPipe fill-drain pipeline in torch.distributed (gloo, loopback,
              isend/irecv; torch_pipeline.py) vs mpirun -n 2 gpipe-train, for
              each M of --micro-batches, with the same 2-stage split
              (targets: >= 1.0x at M = 1 and 2, >= 1.3x at M >= 4).

Fair conditions (printed): one BLAS thread per process on both sides
(OPENBLAS_NUM_THREADS=1 and OMP_NUM_THREADS=1 in every process' environment
before anything is loaded, plus torch.set_num_threads(1)); the same OpenBLAS
library and the same OPENBLAS_* environment for both (--coretype sets
OPENBLAS_CORETYPE for both; OPENBLAS_VERBOSE=2 makes both print the core
OpenBLAS chose); glibc malloc's mmap and trim thresholds raised for the
PyTorch processes so freed tensors are reused rather than page-faulted in
again every step; synthetic data for PyTorch, warm-up steps untimed; for
gpipe-train the training-only samples_per_second of its --summary JSON.

Run with Debian's /usr/bin/python3 (python3-torch); the pyenv python3 on PATH
has no torch.
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import torch_pipeline as tp  # noqa: E402  (does not import torch)

# Issue 11's targets (gpipe samples/s over PyTorch's, measured side by side):
TARGET_1_DECK = 0.9  # issue 21; 1 process, the deck's M against PyTorch's plain loop
TARGET_1_M1 = 1.05    # 1 process, M = 1 against PyTorch's plain loop
TARGET_1_LIKE = 1.05  # 1 process, both accumulating the deck's M micro-batches


def target_2(m):
    """2 processes against the PyTorch fill-drain pipeline, per M."""
    return 1.3 if m >= 4 else 1.0


def sh(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, **kw).stdout


def run_child(cmd, env, cwd=None):
    """Run a measurement in its own process group; on any interruption (Ctrl-C,
    SIGTERM) the whole group (mpirun and its ranks, torch's spawned workers) is
    terminated, so nothing is left running."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=cwd, start_new_session=True)
    try:
        out, _ = proc.communicate()
    except BaseException:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=10)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue
        raise
    return proc.returncode, out


def load():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def busy_processes():
    """Other processes using CPU now (top's first sample), for the record."""
    out = sh(["top", "-bn1"]) if shutil.which("top") else ""
    rows, started = [], False
    for line in out.splitlines():
        if line.strip().startswith("PID"):
            started = True
            continue
        if started and line.strip():
            f = line.split()
            try:
                if float(f[8]) >= 20.0 and f[11] != "top" and int(f[0]) != os.getpid():
                    rows.append(f"{f[11]}({f[8]}%)")
            except (IndexError, ValueError):
                pass
    return ", ".join(rows) or "none"


class ForeignLoad:
    """CPU time the rest of the machine used while our child ran: busy jiffies of
    /proc/stat minus our children's user+system time, in cores (1.0 = one core
    fully taken by someone else). Not exact (clock-tick granularity), but shows
    a compile running next to a measurement."""

    def __enter__(self):
        self.t0, self.c0, self.b0 = time.monotonic(), self._children(), self._busy()
        return self

    def __exit__(self, *exc):
        wall = time.monotonic() - self.t0
        other = (self._busy() - self.b0) - (self._children() - self.c0)
        self.cores = max(0.0, other / wall) if wall > 0 else 0.0
        return False

    @staticmethod
    def _children():
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    @staticmethod
    def _busy():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal
        return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")


def wait_idle(args):
    """Wait (at most --wait-idle seconds) until others use under 0.2 cores for 3 s."""
    deadline = time.monotonic() + args.wait_idle
    while time.monotonic() < deadline:
        b0 = ForeignLoad._busy()
        time.sleep(3)
        if (ForeignLoad._busy() - b0) / 3 < 0.2:
            return


# ---- environment -------------------------------------------------------------
def base_env(args):
    env = dict(os.environ)
    env.update(tp.FAIR_ENV)
    env["OPENBLAS_VERBOSE"] = "2"   # both sides print "Core: NAME" once at load
    if args.coretype:
        env["OPENBLAS_CORETYPE"] = args.coretype
    return env


def blas_env_vars(env):
    return {k: v for k, v in sorted(env.items())
            if k.startswith(("OPENBLAS_", "OMP_", "GOTO", "MKL_", "MALLOC_"))}


def torch_env(args):
    env = base_env(args)
    env.update(tp.MALLOC_ENV)
    return env


# ---- PyTorch -----------------------------------------------------------------
def torch_config(args):
    code = ("import torch, json, sys; sys.path.insert(0, %r); import torch_pipeline as tp;"
            "x = torch.randn(8, 8); x @ x;"
            "print('CONFIG ' + json.dumps({'show': torch.__config__.show(),"
            " 'version': torch.__version__, 'blas': tp.blas_info()}))" % HERE)
    out = sh([args.python, "-c", code], env=torch_env(args))
    for line in out.splitlines():
        if line.startswith("CONFIG "):
            return json.loads(line[7:])
    raise RuntimeError("could not import torch with %s:\n%s" % (args.python, out))


def run_torch(args, mode, micro=None, split=None):
    cmd = [args.python, os.path.join(HERE, "torch_pipeline.py"), "--mode", mode,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--foreach", args.foreach]
    if micro is not None:
        cmd += ["--micro-batches", str(micro)]
    if split is not None:
        cmd += ["--split", " ".join(map(str, split))]
    wait_idle(args)
    with ForeignLoad() as fl:
        _, out = run_child(cmd, torch_env(args))
    log(args, "torch " + " ".join(cmd[2:]), out)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
            res["foreign_load"] = fl.cores
            return res
    raise RuntimeError("PyTorch run failed: %s\n%s" % (" ".join(cmd), out[-3000:]))


# ---- gpipe-kokkos ------------------------------------------------------------
def gpipe_blas(args):
    out = sh(["ldd", args.gpipe_train])
    libs = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if m and re.search(r"blas|lapack|mkl", m.group(1)):
            libs[m.group(1)] = (m.group(2), os.path.realpath(m.group(2)))
    return libs


def run_gpipe(args, ranks, micro, split=None):
    env = base_env(args)
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "summary.json")
        cmd = [args.gpipe_train, args.deck,
               "--set", "data.train_limit=%d" % (args.gpipe_steps * tp.BATCH),
               "--set", "data.test_limit=256",
               "--set", "training.progress_every=0",
               "--set", "training.epochs=1",
               "--set", "training.batch_size=%d" % tp.BATCH,
               "--summary", summary]
        if micro is not None:
            cmd += ["--set", "training.micro_batches=%d" % micro]
        if split is not None:
            cmd += ["--set", "pipeline.balance=[%s]" % ",".join(map(str, split))]
        if ranks > 1 or args.always_mpirun:
            launcher = [args.mpirun, "-n", str(ranks), "--bind-to", args.bind]
            if os.geteuid() == 0:
                launcher.append("--allow-run-as-root")
            for k in blas_env_vars(env):
                launcher += ["-x", k]
            cmd = launcher + cmd
        wait_idle(args)
        with ForeignLoad() as fl:
            rc, out = run_child(cmd, env, ROOT)
        log(args, "gpipe " + " ".join(cmd), out)
        if rc != 0 or not os.path.exists(summary):
            raise RuntimeError("gpipe-train failed (status %d): %s\n%s" % (rc, shlex.join(cmd), out[-3000:]))
        with open(summary) as f:
            res = json.load(f)
    res["foreign_load"] = fl.cores
    res["cores"] = sorted(set(re.findall(r"Core: (\S+)", out)))
    res["warnings"] = [l.strip() for l in out.splitlines() if "warning" in l.lower()]
    res["command"] = shlex.join(cmd)
    return res


def ceiling(gemm_sps, procs, micro, split):
    """Samples/s of an ideal run whose steps are only GEMMs, at the measured GEMM
    rate for micro-batches of N/M rows: 1 process, N / (GEMM time); 2 processes,
    N / (the fill-drain makespan of the two stages' forward and backward GEMMs),
    with free communication."""
    if procs == 1:
        return gemm_sps
    fl = tp.flops_per_sample()
    spec = tp.layer_spec()
    bounds = [0, split[0], len(spec)]
    fwd, bwd = [0.0, 0.0], [0.0, 0.0]
    for s in range(2):
        for i in range(bounds[s], bounds[s + 1]):
            kind, fin, fout = spec[i]
            if kind == "dense":
                fwd[s] += 2 * fin * fout
                bwd[s] += (2 if i == 0 else 4) * fin * fout
    per_flop = 1.0 / (gemm_sps * fl)             # seconds per FLOP at this micro-batch size
    rows = tp.BATCH / micro
    f = [x * rows * per_flop for x in fwd]
    b = [x * rows * per_flop for x in bwd]
    end_f = [[0.0] * micro for _ in range(2)]
    for m in range(micro):                        # F(0..M-1) on both stages
        end_f[0][m] = (end_f[0][m - 1] if m else 0.0) + f[0]
        end_f[1][m] = max(end_f[1][m - 1] if m else 0.0, end_f[0][m]) + f[1]
    t1, t0 = end_f[1][-1], end_f[0][-1]
    for m in reversed(range(micro)):              # B(M-1..0): the last stage first
        t1 = t1 + b[1]
        t0 = max(t0, t1) + b[0]
    return tp.BATCH / t0


def deck_micro_batches(deck):
    """training.micro_batches of the deck (the YAML is simple; no YAML parser needed)."""
    with open(deck) as f:
        m = re.search(r"^\s*micro_batches:\s*(\d+)", f.read(), re.M)
    return int(m.group(1)) if m else 1


def log(args, title, text):
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", title)[:150]
        with open(os.path.join(args.log_dir, name + ".log"), "a") as f:
            f.write(text)


# ---- the study ---------------------------------------------------------------
def best(results):
    """The fastest of the repeats, with all repeats' samples/s attached."""
    results = [r for r in results if r]
    if not results:
        return None
    top = dict(max(results, key=lambda r: r["samples_per_second"]))
    top["all_runs"] = [r["samples_per_second"] for r in results]
    return top


def runs(r):
    return ", ".join("%.0f" % x for x in r["all_runs"])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20,
                   help="timed PyTorch steps, and gpipe-train's steps (train_limit = steps x 256) (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed PyTorch warm-up steps (default 3)")
    p.add_argument("--micro-batches", default="1 2 4 8", help="M values for 2 processes (default '1 2 4 8')")
    p.add_argument("--coretype", default=None,
                   help="set OPENBLAS_CORETYPE=NAME for both sides (e.g. SkylakeX); default: the environment as is")
    p.add_argument("--gpipe-train", default=os.path.join(ROOT, "build", "apps", "gpipe-train"),
                   help="gpipe-train binary (default build/apps/gpipe-train)")
    p.add_argument("--deck", default=os.path.join(ROOT, "inputs", "deep_mlp.yaml"),
                   help="input deck; it must describe the same model as PyTorch's (default inputs/deep_mlp.yaml)")
    p.add_argument("--split", default="flops",
                   help="2-stage split, layers per stage: 'flops' (%s: the exact min-max FLOP balance, "
                        "layers 0-%d | %d-16; given to both sides, to gpipe-train as pipeline.balance=[...]), "
                        "layer counts such as '9 8' (given to both), or 'gpipe' (gpipe-train balances as its "
                        "deck says, pipeline.balance: time, and PyTorch takes the partition it chose in the "
                        "same run) (default flops)"
                        % (" ".join(map(str, tp.flops_split())), tp.flops_split()[0] - 1, tp.flops_split()[0]))
    p.add_argument("--repeats", type=int, default=1,
                   help="run every measurement N times, alternating sides, and keep the best (default 1)")
    p.add_argument("--bind", choices=["none", "core"], default="none",
                   help="mpirun --bind-to for gpipe-train (PyTorch processes are not pinned) (default none)")
    p.add_argument("--foreach", choices=["default", "on", "off"], default="default",
                   help="PyTorch Adam's foreach (multi-tensor) implementation (default: torch's default)")
    p.add_argument("--mpirun", default="mpirun", help="MPI launcher (default mpirun)")
    p.add_argument("--always-mpirun", action="store_true", help="start the 1-rank gpipe-train under mpirun too")
    p.add_argument("--python", default="/usr/bin/python3",
                   help="interpreter with torch for the PyTorch runs (default /usr/bin/python3)")
    p.add_argument("--skip-gpipe", action="store_true", help="PyTorch only (debugging)")
    p.add_argument("--skip-torch", action="store_true", help="gpipe-train only (debugging)")
    p.add_argument("--skip-single", action="store_true", help="only the 2-process rows")
    p.add_argument("--skip-ceiling", action="store_true", help="do not measure the GEMM-only ceiling")
    p.add_argument("--skip-pipeline", action="store_true", help="only the 1-process rows")
    p.add_argument("--wait-idle", type=float, default=0, metavar="S",
                   help="before each measurement wait up to S seconds for the machine to be idle "
                        "(others under 0.2 cores for 3 s) (default 0: do not wait)")
    p.add_argument("--json", default=None, help="write all results to this JSON file")
    p.add_argument("--log-dir", default=None, help="keep every run's output in this folder")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.gpipe_steps = args.steps
    micros = [int(m) for m in args.micro_batches.replace(",", " ").split()]
    if args.split not in ("gpipe", "flops"):
        fixed = [int(s) for s in args.split.replace(",", " ").split()]
    elif args.split == "flops":
        fixed = tp.flops_split()
    else:
        fixed = None
    if not args.skip_gpipe and not os.access(args.gpipe_train, os.X_OK):
        p.error("%s: not found or not executable (build it, or give --gpipe-train, or --skip-gpipe)" % args.gpipe_train)
    snapshot = None
    if not args.skip_gpipe:
        # every row uses the same binary even if someone rebuilds build/ meanwhile
        snapshot = tempfile.TemporaryDirectory(prefix="compare_pytorch_")
        copy = os.path.join(snapshot.name, "gpipe-train")
        shutil.copy2(args.gpipe_train, copy)
        args.gpipe_train_original, args.gpipe_train = args.gpipe_train, copy

    # ---- conditions
    print("== gpipe-kokkos vs PyTorch, deep MLP (784-8x1024-10, float32, batch 256, Adam 2e-4)")
    print("date      :", datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z"))
    cpu = re.search(r"Model name:\s*(.*)", sh(["lscpu"]))
    print("machine   : %s, %d cores (nproc), %s" % (cpu.group(1).strip() if cpu else platform.processor(),
                                                   os.cpu_count(), platform.platform()))
    print("load      : %s (1/5/15 min); other busy processes: %s" % (load(), busy_processes()))
    head = sh(["git", "-C", ROOT, "log", "-1", "--format=%h %cd %s", "--date=format:%Y-%m-%d %H:%M"]).strip()
    dirty = sh(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"]).strip()
    print("source    : %s%s" % (head, " (with uncommitted changes)" if dirty else ""))
    env = base_env(args)
    print("BLAS env  : both sides: %s" % " ".join("%s=%s" % kv for kv in blas_env_vars(env).items()))
    print("            PyTorch also: %s, torch.set_num_threads(1), set_num_interop_threads(1); mallopt the same"
          % " ".join("%s=%s" % kv for kv in tp.MALLOC_ENV.items()))
    print("            OPENBLAS_CORETYPE: %s" % (env.get("OPENBLAS_CORETYPE") or "unset (OpenBLAS detects the core)"))
    results = {"args": vars(args), "env": blas_env_vars(env), "single": {}, "pipeline": {}}
    if not args.skip_torch:
        cfg = torch_config(args)
        show = cfg["show"]
        keys = re.findall(r"(BLAS_INFO=[^,]*|LAPACK_INFO=[^,]*|USE_MKLDNN=[^,]*|USE_OPENMP=[^,]*)", show)
        feats = [l.strip(" -") for l in show.splitlines()
                 if re.search(r"MKL|OpenMP|LAPACK|CPU capability", l) and "Build settings" not in l]
        print("PyTorch   : %s, %s; %s" % (cfg["version"], "; ".join(feats), ", ".join(keys)))
        print("            loaded: %s" % ", ".join(cfg["blas"]["libraries"]))
        print("            OpenBLAS core: %s (%s)" % (cfg["blas"].get("openblas_core"),
                                                      cfg["blas"].get("openblas_config")))
        results["torch_config"] = cfg
    if not args.skip_gpipe:
        libs = gpipe_blas(args)
        st = os.stat(args.gpipe_train)
        with open(args.gpipe_train, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:12]
        print("gpipe     : %s (built %s, sha256 %s; a copy is run)" % (
            os.path.relpath(args.gpipe_train_original, ROOT),
            datetime.datetime.fromtimestamp(st.st_mtime).strftime("%Y-%m-%d %H:%M"), digest))
        print("            %s" % sh([args.gpipe_train, "--version"]).strip().replace("\n", "; "))
        print("            ldd: %s" % ", ".join("%s => %s" % (k, v[1]) for k, v in libs.items()))
        results["gpipe_blas"] = libs
        if not args.skip_torch:
            ob = [v[1] for k, v in libs.items() if "openblas" in k]
            same = ob and any(os.path.realpath(l) == ob[0] for l in cfg["blas"]["libraries"])
            print("same BLAS : %s" % ("yes, both load %s" % ob[0] if same else "NO: check the libraries above"))
    print("steps     : PyTorch %d warm-up + %d timed; gpipe-train %d steps (train_limit %d, all timed, "
          "evaluation on 256 test samples excluded)" % (args.warmup, args.steps, args.gpipe_steps,
                                                        args.gpipe_steps * tp.BATCH))
    print("mpirun    : --bind-to %s; PyTorch processes unpinned; repeats %d (best kept)" % (args.bind, args.repeats))
    sys.stdout.flush()

    rows = []   # (configuration, split label, torch result, gpipe result, target, (processes, M, split))

    # ---- 1 process
    if not args.skip_single:
        deck_m = deck_micro_batches(args.deck)
        t_res, t_acc, g_deck, g_one = [], [], [], []
        for _ in range(args.repeats):
            if not args.skip_torch:
                t_res.append(run_torch(args, "single"))
                if deck_m > 1:
                    t_acc.append(run_torch(args, "single", deck_m))
            if not args.skip_gpipe:
                g_deck.append(run_gpipe(args, 1, None))
                if deck_m > 1:
                    g_one.append(run_gpipe(args, 1, 1))
        results["single"] = {"torch": t_res, "torch_accumulate": t_acc, "gpipe_deck": g_deck, "gpipe_M=1": g_one}
        t = best(t_res)
        # the targets' ceiling: the GEMMs of the faster configuration
        rows.append(("1 process, gpipe M=%d (deck)" % deck_m, "-", t, best(g_deck), TARGET_1_DECK, (1, deck_m, None)))
        if deck_m > 1:
            rows.append(("1 process, gpipe M=1", "-", t, best(g_one), TARGET_1_M1, (1, 1, None)))
            rows.append(("1 process, both M=%d" % deck_m, "-", best(t_acc), best(g_deck), TARGET_1_LIKE,
                         (1, deck_m, None)))

    # ---- 2 processes
    if not args.skip_pipeline:
        for m in micros:
            t_res, g_res = [], []
            for _ in range(args.repeats):
                split = fixed
                if not args.skip_gpipe:
                    g_res.append(run_gpipe(args, 2, m, fixed))
                    if split is None:
                        split = g_res[-1]["partition"]
                if split is None:
                    split = tp.flops_split()
                if not args.skip_torch:
                    t_res.append(run_torch(args, "pipeline", m, split))
            t, g = best(t_res), best(g_res)
            results["pipeline"]["M=%d" % m] = {"torch": t_res, "gpipe": g_res}
            splits = []
            for used in ([t["split"]] if t else []) + ([g["partition"]] if g else []):
                if "|".join(map(str, used)) not in splits:
                    splits.append("|".join(map(str, used)))
            rows.append(("2 processes, M=%d" % m, "/".join(splits), t, g, target_2(m),
                         (2, m, (t or g)["split" if t else "partition"])))

    # ---- the GEMM-only ceiling on this BLAS
    gemm = {}
    if not args.skip_torch and not args.skip_ceiling:
        for m in sorted({r[5][1] for r in rows}):
            gemm[m] = best([run_torch(args, "gemm", m) for _ in range(max(3, args.repeats))])
        results["gemm"] = {str(m): r for m, r in gemm.items()}

    # ---- table
    print()
    print("%-28s %-7s %10s %10s %6s %7s %9s %9s  %s" % (
        "configuration", "split", "PyTorch", "gpipe", "ratio", "target", "needed", "ceiling", "status"))
    print("%-28s %-7s %10s %10s %6s %7s %9s %9s" % ("", "", "samples/s", "samples/s", "g/t", "", "samples/s",
                                                    "samples/s"))
    for name, split, t, g, target, (procs, m, stages) in rows:
        ts = t["samples_per_second"] if t else None
        gs = g["samples_per_second"] if g else None
        ratio = gs / ts if ts and gs else None
        ceil = ceiling(gemm[m]["samples_per_second"], procs, m, stages) if m in gemm else None
        needed = target * ts if target and ts else None
        if target is None:
            status = "(like for like, no target)"
        else:
            status = "-" if ratio is None else ("met" if ratio >= target else "MISSED")
            if needed and ceil and needed > ceil:
                status += " (needed > ceiling)"
        print("%-28s %-7s %10s %10s %6s %7s %9s %9s  %s" % (
            name, split, "%.0f" % ts if ts else "-", "%.0f" % gs if gs else "-",
            "%.2f" % ratio if ratio else "-", ">=%.2fx" % target if target else "",
            "%.0f" % needed if needed else "-", "%.0f" % ceil if ceil else "-", status))
    if gemm:
        print("needed : the target x PyTorch's samples/s")
        print("ceiling: samples/s if a step were nothing but its GEMMs on this BLAS, one thread per process,")
        print("         micro-batches of N/M rows (measured, GEMMs only: %s);"
              % ", ".join("M=%d %.0f samples/s = %.1f GFLOP/s" % (m, r["samples_per_second"], r["gflops"])
                          for m, r in sorted(gemm.items())))
        print("         for 2 processes: the fill-drain makespan of the split's GEMMs, communication free")

    # ---- details
    print()
    fl = tp.flops_per_sample()
    print("details (%.1f MFLOP per sample, forward + backward GEMMs):" % (fl / 1e6))
    for name, split, t, g, target, _ in rows:
        print("  %s" % name)
        if t:
            waits = ""
            if t.get("ranks"):
                waits = "; waiting " + ", ".join("rank %d %.0f%%" % (r["rank"], 100 * r["wait_seconds"] / r["seconds"])
                                                 for r in t["ranks"])
            print("    PyTorch: runs %s samples/s; %.1f GFLOP/s, %.0f minor page faults/step, OpenBLAS core %s, "
                  "others' load %.2f cores%s"
                  % (runs(t), t["samples_per_second"] * fl / 1e9, t["minor_faults_per_step"],
                     t["blas"].get("openblas_core"), t["foreign_load"], waits))
        if g:
            print("    gpipe  : runs %s samples/s; %.1f GFLOP/s, partition %s, imbalance %.3f, OpenBLAS core %s, "
                  "others' load %.2f cores"
                  % (runs(g), g["samples_per_second"] * fl / 1e9, "|".join(map(str, g.get("partition", []))),
                     g.get("imbalance", float("nan")), ",".join(g["cores"]) or "?", g["foreign_load"]))
    warnings = sorted({w for k in results["pipeline"].values() for g in k["gpipe"] for w in g["warnings"]} |
                      {w for k, v in results["single"].items() if k.startswith("gpipe") for g in v
                       for w in g["warnings"]})
    if warnings:
        print("gpipe-train warnings:")
        for w in warnings:
            print("  " + w)
    print("load after: %s (1/5/15 min); other busy processes: %s" % (load(), busy_processes()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
        print("results written to", args.json)


if __name__ == "__main__":
    main()
