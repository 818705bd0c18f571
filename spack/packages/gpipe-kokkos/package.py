# Spack recipe for gpipe-kokkos, in a Package API v1.0 repository (spack/repo.yaml):
# Spack 0.23 loads it as is; Spack 1.x loads v1.0 repositories with the build
# systems (CMakePackage, CudaPackage, ROCmPackage) already in scope. Usage and the
# Kokkos options the library needs: docs/porting.md.
#
# Versions come from git: `main` is the branch of the repository this recipe
# lives in (the clone that holds spack/), or of GPIPE_KOKKOS_GIT when that
# environment variable names another clone or a server URL. Tags v<X.Y.Z> become
# versions once they exist (add version("X.Y.Z", tag="vX.Y.Z", commit="<sha>")).
#
# Examples
#   spack repo add spack
#   spack install gpipe-kokkos@main                                      # Kokkos Serial, OpenBLAS
#   spack install gpipe-kokkos@main +openmp
#   spack install gpipe-kokkos@main +cuda cuda_arch=90 ^kokkos+wrapper   # H100 (Kokkos_ARCH_HOPPER90)
#   spack install gpipe-kokkos@main +cuda cuda_arch=80 ^kokkos+wrapper   # A100 (Kokkos_ARCH_AMPERE80)
#   spack install gpipe-kokkos@main +rocm amdgpu_target=gfx90a           # MI250X
#   spack install gpipe-kokkos@main +sycl %oneapi ^kokkos intel_gpu_arch=intel_pvc

import os

from spack.package import *

# The repository root: spack/packages/gpipe-kokkos/package.py is three levels down.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class GpipeKokkos(CMakePackage, CudaPackage, ROCmPackage):
    """GPipe pipeline-parallel training of neural networks on HPC clusters:
    one pipeline cell per MPI rank, layers written once against Kokkos Views
    and Kokkos Kernels BLAS (any Kokkos backend), MPI point-to-point between
    cells, parallel-HDF5 checkpoints."""

    # git: a clone reachable from the build machine. By default the clone this
    # recipe came from (file://); GPIPE_KOKKOS_GIT overrides it (a site mirror).
    git = os.environ.get("GPIPE_KOKKOS_GIT", "file://" + _CHECKOUT)
    homepage = git

    version("main", branch="main")

    # --- variants -----------------------------------------------------------
    # Backends: +cuda cuda_arch=.. and +rocm amdgpu_target=.. come from the
    # CudaPackage / ROCmPackage mixins; without a device backend the build uses
    # Kokkos' host backend (Serial, or OpenMP with +openmp).
    variant("openmp", default=False, description="Kokkos' OpenMP host backend (threads per rank)")
    variant("sycl", default=False, description="Kokkos SYCL backend (Intel GPUs, icpx)")

    # Kokkos compiles for exactly one GPU architecture: make ours single-valued
    # too (the mixin's are multi-valued), as the kokkos recipe does.
    variant(
        "cuda_arch",
        description="CUDA architecture (Kokkos' Kokkos_ARCH_*: 80 Ampere, 90 Hopper, ...)",
        values=("none",) + CudaPackage.cuda_arch_values,
        default="none",
        multi=False,
        sticky=True,
        when="+cuda",
    )
    variant(
        "amdgpu_target",
        description="AMD GPU architecture (gfx90a MI250X, gfx942 MI300, ...)",
        values=("none",) + ROCmPackage.amdgpu_targets,
        default="none",
        multi=False,
        sticky=True,
        when="+rocm",
    )

    variant(
        "gpu_aware_mpi",
        default=False,
        description="Pass device pointers to MPI (GPIPE_ENABLE_GPU_AWARE_MPI); "
        "the MPI library must be GPU-aware, which Spack does not check",
    )
    variant(
        "vendor_blas",
        default=True,
        description="Kokkos Kernels with the vendor BLAS TPL for gemm: "
        "cuBLAS (+cuda), rocBLAS (+rocm), BLAS e.g. OpenBLAS (host backends)",
    )
    variant(
        "onednn",
        default=False,
        description="oneDNN implementation of the kernel seam (x86 CPUs; GPIPE_ENABLE_ONEDNN)",
    )
    variant("tests", default=False, description="Build the GoogleTest suite (GPIPE_ENABLE_TESTS)")
    variant(
        "benchmarks",
        default=False,
        description="Build the Google Benchmark suite (GPIPE_ENABLE_BENCHMARKS)",
    )

    conflicts("+cuda", when="+rocm", msg="choose one device backend")
    conflicts("+sycl", when="+cuda", msg="choose one device backend")
    conflicts("+sycl", when="+rocm", msg="choose one device backend")
    conflicts("cuda_arch=none", when="+cuda", msg="+cuda needs cuda_arch (e.g. cuda_arch=90)")
    conflicts(
        "+gpu_aware_mpi",
        when="~cuda ~rocm ~sycl",
        msg="+gpu_aware_mpi only matters with a device backend (+cuda, +rocm or +sycl)",
    )

    # --- dependencies ---------------------------------------------------------
    depends_on("c", type="build")  # project(LANGUAGES C CXX): FindHDF5 needs C
    depends_on("cxx", type="build")
    depends_on("cmake@3.20:", type="build")

    depends_on("kokkos@4:")
    depends_on("kokkos-kernels@4:")

    # Kokkos' backends follow ours: a Kokkos with a device backend we were not
    # asked for would make that device the default execution space.
    depends_on("onednn", when="+onednn")
    depends_on("kokkos+openmp", when="+openmp")
    depends_on("kokkos~cuda", when="~cuda")
    depends_on("kokkos~rocm", when="~rocm")
    depends_on("kokkos~sycl", when="~sycl")
    depends_on("kokkos+sycl", when="+sycl")
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"kokkos+cuda cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")
    for _target in ROCmPackage.amdgpu_targets:
        depends_on(f"kokkos+rocm amdgpu_target={_target}", when=f"+rocm amdgpu_target={_target}")
    # Device lambdas (KOKKOS_LAMBDA): on by default in Kokkos 4, but the kokkos
    # recipe passes Kokkos_ENABLE_CUDA_LAMBDA=OFF unless +cuda_lambda; always on in 5.
    requires("^kokkos+cuda_lambda", when="+cuda ^kokkos@:4")
    # Kokkos' CUDA backend needs CUDA-13 fixes first released in 4.7.02 / 5.0.1
    # (docs/porting.md, "CUDA 13"). Drop this if your Kokkos carries them.
    conflicts("^cuda@13:", when="+cuda ^kokkos@:4.7.01", msg="CUDA 13 needs Kokkos 4.7.02 or 5.0.1+")
    conflicts("^cuda@13:", when="+cuda ^kokkos@5.0.0", msg="CUDA 13 needs Kokkos 4.7.02 or 5.0.1+")

    depends_on("kokkos-kernels+cublas", when="+vendor_blas +cuda")
    depends_on("kokkos-kernels+rocblas", when="+vendor_blas +rocm")
    depends_on("kokkos-kernels+blas", when="+vendor_blas ~cuda ~rocm ~sycl")

    depends_on("mpi")
    depends_on("hdf5+mpi")  # checkpoints are written with parallel HDF5 (C API)
    depends_on("yaml-cpp")
    depends_on("zlib-api")
    depends_on("fmt")
    depends_on("spdlog")
    depends_on("cli11")
    depends_on("nlohmann-json@3:")
    depends_on("googletest", when="+tests")
    depends_on("benchmark", when="+benchmarks")

    sanity_check_is_file = [join_path("bin", "gpipe-train")]
    sanity_check_is_dir = [join_path("include", "gpipe")]

    def _kokkos_cxx(self):
        """Kokkos' C++ compiler: nvcc_wrapper for nvcc-based CUDA builds."""
        kokkos = self.spec["kokkos"]
        # Spack 1.x: a property of the kokkos package. Spack 0.2x: an attribute
        # that kokkos' setup_dependent_package sets on its spec.
        for owner in (lambda: kokkos.package, lambda: kokkos):
            try:
                cxx = owner().kokkos_cxx
            except Exception:
                continue
            if cxx:
                return str(cxx)
        return join_path(kokkos.prefix.bin, "nvcc_wrapper")

    def cmake_args(self):
        spec = self.spec
        if spec.satisfies("^kokkos+cmake_lang"):
            raise InstallError(
                "gpipe-kokkos compiles Kokkos code as C++: use a kokkos built with "
                "~cmake_lang (nvcc_wrapper or clang for CUDA, hipcc for HIP)"
            )
        args = [
            self.define_from_variant("GPIPE_ENABLE_TESTS", "tests"),
            self.define_from_variant("GPIPE_ENABLE_BENCHMARKS", "benchmarks"),
            self.define_from_variant("GPIPE_ENABLE_GPU_AWARE_MPI", "gpu_aware_mpi"),
            # explicit either way: not switched on by a oneDNN that happens to be on the system
            self.define_from_variant("GPIPE_ENABLE_ONEDNN", "onednn"),
            self.define("Kokkos_ROOT", spec["kokkos"].prefix),
            self.define("KokkosKernels_ROOT", spec["kokkos-kernels"].prefix),
        ]
        if spec.satisfies("+cuda"):
            args.append(self.define("CMAKE_CXX_COMPILER", self._kokkos_cxx()))
        elif spec.satisfies("+rocm"):
            args.append(self.define("CMAKE_CXX_COMPILER", spec["hip"].hipcc))
        # +sycl: Spack's C++ compiler, which must be the oneAPI icpx that built Kokkos.
        return args
