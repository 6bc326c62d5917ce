"""envsuite's native CPU kernels (``_native*.cpp``), built on first use for the CPU this process runs on.

The sources ship with the package (``_native.h`` says which file holds what); :func:`native_kernels`
compiles them into one library once with the host's C++ compiler
(``$CXX``, else ``g++``/``c++``/``clang++``), ``-O3`` for an :class:`InstructionSet` (``-march=native``
unless ``$ENVSUITE_NATIVE_ISA`` names a narrower one) against the installed torch, into
``$ENVSUITE_NATIVE_CACHE/<key>/``, else ``<envsuite cache>/native/<key>/`` (``envsuite.models.cache_dir``), where the key hashes the sources, the
torch version, the compiler, the instruction set and the CPU (model and instruction-set flags: a library built for one CPU
may not run on another that shares the home directory). Later processes load it in a few milliseconds.

The same sources serve every vector width (GCC's generic vectors, ``_native.h``), so the tests build and
run them for each width the project ships on whatever box runs the tests (``tests/test_native_isa.py``):
an AVX-512 box checks its own build, the AVX2 build and the portable one; an AVX2 box the last two.
The first build takes 20-60 s on two cores; concurrent processes wait for one build (a file lock), and a
failed build is remembered under its key (with the compiler's message), so it is not retried until the
source, torch or the compiler change.

Where anything is missing (no compiler, not Linux, a build error, a torch without the C++ headers)
:func:`native_kernels` says why and the engine keeps torch's own kernels: nothing else changes.

The library registers ``torch.ops.envsuite`` (``_native_library.cpp``): matrix products
(``rows_linear``, ``panel_linear``, the layout ``pack_panels``), the decode step's kernels and the whole
layer stack (``decode_layers``), and next-token choice (``sample_rows``).
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from envsuite.engine._host import cpu_flags, cpu_identity

logger = logging.getLogger(__name__)

SOURCE_DIR = Path(__file__).parent
SOURCES = tuple(sorted(SOURCE_DIR.glob("_native*.cpp")))
"""The translation units compiled into the library (``_native.h`` is included by each)."""
HEADERS = tuple(sorted(SOURCE_DIR.glob("_native*.h")))
CACHE_ENV = "ENVSUITE_NATIVE_CACHE"
ISA_ENV = "ENVSUITE_NATIVE_ISA"
LIBRARY_NAME = "envsuite_kernels.so"
BUILD_TIMEOUT_S = 600.0
"""A build that takes longer is abandoned (and remembered as failed)."""


class InstructionSet(enum.StrEnum):
    """The instructions a build of the native kernels may use (``$ENVSUITE_NATIVE_ISA``)."""

    NATIVE = "native"
    """Everything this CPU has (``-march=native``): the default, what users run."""
    AVX512 = "avx512"
    """x86-64-v4: AVX-512 F/BW/CD/DQ/VL with FMA (Zen 4-5, Intel Xeon since Skylake-SP)."""
    AVX2 = "avx2"
    """x86-64-v3: AVX2 with FMA, 16 vector registers (Zen 1-3, Intel since Haswell)."""
    PORTABLE = "portable"
    """The architecture's baseline (x86-64: SSE2; aarch64: NEON): runs on any CPU of the architecture."""

    def compiler_flags(self) -> tuple[str, ...]:
        if self is InstructionSet.NATIVE:
            return ("-march=native",)
        if platform.machine() in ("x86_64", "AMD64"):
            level = {InstructionSet.AVX512: "x86-64-v4", InstructionSet.AVX2: "x86-64-v3"}
            return (f"-march={level.get(self, 'x86-64')}",)
        return ("-march=armv8-a",) if self is InstructionSet.PORTABLE else ()

    def runs_here(self) -> bool:
        """Whether this CPU executes a build for this instruction set (every flag its level requires)."""
        if self in (InstructionSet.NATIVE, InstructionSet.PORTABLE):
            return True
        if platform.machine() not in ("x86_64", "AMD64"):
            return False
        return _LEVEL_FLAGS[self] <= cpu_flags()


# The /proc/cpuinfo flags each x86-64 micro-architecture level requires (the x86-64 psABI's table;
# v4 includes v3).
_V3_FLAGS = frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave", "abm"})
_LEVEL_FLAGS = {
    InstructionSet.AVX2: _V3_FLAGS,
    InstructionSet.AVX512: _V3_FLAGS | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"},
}


def instruction_set() -> InstructionSet:
    """The instruction set this process builds for: ``$ENVSUITE_NATIVE_ISA``, else ``native``."""
    name = os.environ.get(ISA_ENV, "").strip().lower() or InstructionSet.NATIVE.value
    try:
        return InstructionSet(name)
    except ValueError:
        choices = ", ".join(isa.value for isa in InstructionSet)
        raise ValueError(f"${ISA_ENV}={name!r} is not an instruction set; choose one of {choices}") from None


@dataclass(frozen=True)
class NativeKernels:
    """Whether the native kernels are loaded in this process, and from where (or why not)."""

    available: bool
    library: Path | None
    reason: str
    """How they were obtained ("built in 23.1 s", "cached build") or why they are unavailable."""
    isa: InstructionSet = InstructionSet.NATIVE
    """The instructions the build was allowed to use."""

    def describe(self) -> str:
        """One line for reports (``envsuite doctor``): how they were obtained and for which instructions."""
        return f"{self.reason}, for {self.isa} instructions" if self.available else self.reason


def _compiler() -> str | None:
    for candidate in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


def _compiler_version(compiler: str) -> str:
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


def source_digest() -> str:
    """A hash of every source and header file (names and bytes): a change to any of them is a new build."""
    digest = hashlib.sha256()
    for path in (*SOURCES, *HEADERS):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _build_key(compiler: str, isa: InstructionSet) -> str:
    parts = [
        isa.value,
        source_digest(),
        torch.__version__,
        str(torch._C._GLIBCXX_USE_CXX11_ABI),
        _compiler_version(compiler),
        repr(cpu_identity()),
        sys.platform,
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _command(compiler: str, output: Path, isa: InstructionSet) -> list[str]:
    from torch.utils.cpp_extension import include_paths, library_paths

    torch_lib = library_paths()[0]
    return [
        compiler,
        "-O3",
        *isa.compiler_flags(),
        "-fopenmp",
        "-shared",
        "-fPIC",
        "-std=c++20",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        *(f"-I{path}" for path in include_paths()),
        *(str(path) for path in SOURCES),
        "-o",
        str(output),
        f"-L{torch_lib}",
        "-lc10",
        "-ltorch_cpu",
        # torch's own OpenMP runtime (torch/lib/libgomp.so.1), so the kernels share torch's thread pool
        f"-Wl,-rpath,{torch_lib}",
    ]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(compiler: str, directory: Path, isa: InstructionSet) -> str:
    """Compile into ``directory`` (atomically: a temporary name, then a rename); returns how long it took."""
    library = directory / LIBRARY_NAME
    partial = directory / f".{LIBRARY_NAME}.{os.getpid()}"
    logger.warning(
        "building envsuite's native CPU kernels for this CPU, %s (once; 20-60 s): %s", isa, directory
    )
    started = time.perf_counter()
    try:
        command = _command(compiler, partial, isa)
        if getattr(_in_background, "value", False) and shutil.which("nice"):
            command = ["nice", "-n", "10", *command]  # behind the engine that is sampling meanwhile
        result = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"the compiler did not run: {exc}") from exc
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"the compiler failed ({result.returncode}):\n{result.stderr[-4000:]}")
    partial.rename(library)
    return f"built in {time.perf_counter() - started:.1f} s"


_load_lock = threading.Lock()
_in_background = threading.local()


@contextlib.contextmanager
def building_in_background() -> Iterator[None]:
    """A build started on this thread meanwhile runs at a lower priority (``nice``): an engine samples
    on the CPU while it compiles (``_first_use``)."""
    _in_background.value = True
    try:
        yield
    finally:
        _in_background.value = False


FAILED_NAME = "build-failed.txt"


def _unbuildable(isa: InstructionSet) -> NativeKernels | None:
    """Why no build can be made here at all (None: one can)."""
    if not sys.platform.startswith("linux"):
        return NativeKernels(False, None, f"built only on Linux (this is {sys.platform})")
    if not isa.runs_here():
        return NativeKernels(False, None, f"this CPU cannot run a build for {isa} (${ISA_ENV})", isa)
    if _compiler() is None:
        return NativeKernels(False, None, "no C++ compiler found ($CXX, g++, c++, clang++)", isa)
    return None


def _build_directory(compiler: str, isa: InstructionSet) -> Path:
    from envsuite.models import cache_dir

    root = Path(os.environ[CACHE_ENV]).expanduser() if os.environ.get(CACHE_ENV) else cache_dir() / "native"
    return root / _build_key(compiler, isa)


@functools.cache
def _load_once() -> NativeKernels:
    isa = instruction_set()
    unbuildable = _unbuildable(isa)
    if unbuildable is not None:
        return unbuildable
    compiler = _compiler()
    assert compiler is not None
    directory = _build_directory(compiler, isa)
    library, failed = directory / LIBRARY_NAME, directory / FAILED_NAME
    with _locked(directory / ".lock"):
        if failed.is_file():
            return NativeKernels(False, None, f"an earlier build failed (see {failed})", isa)
        how = "cached build"
        if not library.is_file():
            try:
                how = _build(compiler, directory, isa)
            except RuntimeError as exc:
                failed.write_text(str(exc))
                logger.warning("envsuite's native CPU kernels are unavailable: %s", str(exc)[:500])
                return NativeKernels(False, None, f"the build failed (see {failed})", isa)
    try:
        torch.ops.load_library(str(library))
    except (OSError, RuntimeError) as exc:
        return NativeKernels(False, library, f"the library did not load: {exc}", isa)
    return NativeKernels(True, library, how, isa)


def native_kernels() -> NativeKernels:
    """Build (first time on this CPU) and load the native kernels; says whether they are available."""
    with _load_lock:
        return _load_once()


def native_kernels_built() -> bool:
    """Whether :func:`native_kernels` answers without compiling: loaded already, a cached or failed
    build on disk, or no build possible here (the sampling engine's first use waits only then)."""
    if _load_once.cache_info().currsize:
        return True
    isa = instruction_set()
    compiler = _compiler()
    if _unbuildable(isa) is not None or compiler is None:
        return True
    directory = _build_directory(compiler, isa)
    return (directory / LIBRARY_NAME).is_file() or (directory / FAILED_NAME).is_file()
