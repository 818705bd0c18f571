#!/usr/bin/env python3
"""Loads spack/packages/gpipe-kokkos/package.py with a stand-in for
spack.package (Spack is not needed) and checks its version scheme and backend
variants: a git version `main` from a clone that exists, no placeholder
address, one variant or mixin per Kokkos backend.
usage: test_spack_recipe.py SOURCE_DIR"""
import os
import subprocess
import sys
import types

root = sys.argv[1]
recorded = {"version": [], "variant": [], "depends_on": [], "conflicts": []}


def recorder(kind):
    def record(*args, **kwargs):
        recorded[kind].append((args, kwargs))
    return record


class Base:
    cuda_arch_values = ("80", "90")
    amdgpu_targets = ("gfx90a", "gfx942")


stub = types.ModuleType("spack.package")
stub.CMakePackage = type("CMakePackage", (Base,), {})
stub.CudaPackage = type("CudaPackage", (Base,), {})
stub.ROCmPackage = type("ROCmPackage", (Base,), {})
for name in recorded:
    setattr(stub, name, recorder(name))
stub.requires = lambda *a, **k: None
stub.join_path = os.path.join
stub.InstallError = RuntimeError
stub.__all__ = [n for n in vars(stub) if not n.startswith("_")]
sys.modules["spack"] = types.ModuleType("spack")
sys.modules["spack.package"] = stub

os.environ.pop("GPIPE_KOKKOS_GIT", None)
path = os.path.join(root, "spack", "packages", "gpipe-kokkos", "package.py")
namespace = {"__file__": path, "__name__": "gpipe_kokkos_recipe"}
exec(compile(open(path).read(), path, "exec"), namespace)
pkg = namespace["GpipeKokkos"]
passed = failed = 0


def expect(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}")


source = open(path).read()
expect("example.org" not in source and "REPLACE-ME" not in source, "no placeholder address")
expect(pkg.git.startswith("file://"), f"git is a file:// clone by default, not {pkg.git}")
clone = pkg.git[len("file://"):]
expect(os.path.realpath(clone) == os.path.realpath(root), f"git points at this clone ({clone})")
inside = subprocess.run(["git", "-C", clone, "rev-parse", "--git-dir"], capture_output=True)
expect(inside.returncode == 0, f"{clone} is a git repository")
versions = {a[0]: k for a, k in recorded["version"]}
expect(versions == {"main": {"branch": "main"}}, f"one version, main from the branch main: {versions}")
variants = {a[0] for a, _ in recorded["variant"]}
for v in ("openmp", "sycl", "cuda_arch", "amdgpu_target", "gpu_aware_mpi", "vendor_blas"):
    expect(v in variants, f"variant {v}")
expect(issubclass(pkg, stub.CudaPackage) and issubclass(pkg, stub.ROCmPackage), "+cuda and +rocm mixins")
os.environ["GPIPE_KOKKOS_GIT"] = "https://mirror.example/gpipe-kokkos.git"
exec(compile(source, path, "exec"), namespace)
expect(namespace["GpipeKokkos"].git == os.environ["GPIPE_KOKKOS_GIT"], "GPIPE_KOKKOS_GIT overrides git")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
