"""The native kernels' tests for every vector width the project ships, on whatever box runs the tests.

The kernels are one set of sources (GCC's generic 16-float vectors) compiled for the CPU at hand, and
their numerics follow the instructions the compiler may use: a tolerance tuned on an AVX-512 box once
failed on an AVX2-only one (Zen 3). So the suite builds the kernels for each narrower instruction set
this CPU can execute (``$ENVSUITE_NATIVE_ISA``: AVX2 with FMA, the portable baseline; the main run
covers this CPU's own, ``-march=native``) and runs the kernel tests against each build in a child
pytest, with torch's own CPU kernels held to the same width (``$ATEN_CPU_CAPABILITY``), as on a CPU of
that kind. A width this CPU cannot execute (AVX-512 on Zen 3) is skipped saying so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from envsuite.engine import cpu_identity
from envsuite.engine.kernels import InstructionSet, instruction_set, native_kernels
from envsuite.engine.kernels._native import ISA_ENV, _build_key

ROOT = Path(__file__).resolve().parents[1]
KERNEL_TESTS = (
    "tests/test_native_layers.py",
    "tests/test_sampling_fast_paths.py",
    "tests/test_kernel_plan.py",
    "tests/test_native_adapters.py",
)
"""Every test file that runs the native kernels' ops (they skip without them)."""
TORCH_CAPABILITY = {
    InstructionSet.AVX512: "avx512",
    InstructionSet.AVX2: "avx2",
    InstructionSet.PORTABLE: "default",
}
"""torch's dispatch level (``ATEN_CPU_CAPABILITY``) for a CPU whose widest vectors are the set's."""
WIDTH_DEPENDENT = " and ".join(
    f"not {name}"
    for name in (
        "smollm2",  # the embedded model's cases repeat the tiny model's at ~3x the time
        "torch-",  # torch's own way of choosing tokens: no native kernel in it
        "calibrated",  # the calibration's choice: the paths it may choose are each tested alone
        "doctor",  # the report's text (148 s of calibrating, no numerics)
        "failed_native_build",  # the fallback when the build fails: about the build, not the width
    )
)
"""The kernel tests whose outcome can depend on the vector width (``pytest -k``): the rest run once, in
the main run. A width's child run took ~5 min on a loaded 2-core AMD EPYC (family 25, model 17), against
~9 min for all of the kernel tests' files."""
WIDEST = {"AVX-512": InstructionSet.AVX512, "AVX2": InstructionSet.AVX2}


def test_an_unknown_instruction_set_is_refused_naming_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ISA_ENV, "avx9000")
    with pytest.raises(ValueError, match=r"avx9000.*native, avx512, avx2, portable"):
        instruction_set()
    monkeypatch.setenv(ISA_ENV, " AVX2 ")
    assert instruction_set() is InstructionSet.AVX2


def test_each_instruction_set_is_its_own_build() -> None:
    """A build for one set is never loaded for another (the cache key names the set)."""
    keys = {_build_key("g++", isa) for isa in InstructionSet}
    assert len(keys) == len(InstructionSet)
    assert InstructionSet.PORTABLE.runs_here() and InstructionSet.NATIVE.runs_here()


@pytest.mark.parametrize("isa", [InstructionSet.AVX512, InstructionSet.AVX2, InstructionSet.PORTABLE])
def test_kernel_tests_pass_for_each_vector_width(isa: InstructionSet) -> None:
    if os.environ.get(ISA_ENV):
        pytest.skip(f"this run already builds for {os.environ[ISA_ENV]}")
    if not native_kernels().available:
        pytest.skip(f"the native kernels are not built here: {native_kernels().reason}")
    if not isa.runs_here():
        pytest.skip(f"this CPU ({cpu_identity().describe()}) cannot execute {isa} instructions")
    if WIDEST.get(cpu_identity().vector_unit) is isa:
        pytest.skip(f"this CPU's own build (-march=native) is {isa}: the main run tests it")
    env = {**os.environ, ISA_ENV: isa.value, "ATEN_CPU_CAPABILITY": TORCH_CAPABILITY[isa]}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "-k", WIDTH_DEPENDENT]
    command += [*KERNEL_TESTS, "--durations=3"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    tail = (result.stdout + result.stderr)[-6000:]
    assert result.returncode == 0, tail
    assert " passed" in tail, tail
