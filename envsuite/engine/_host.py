"""This machine's CPU, read once from ``/proc/cpuinfo`` (``platform`` elsewhere). No torch here: the
benches that only start child processes name the CPU through it too (``bench/_host.py``)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CpuIdentity:
    """What identifies a CPU for built code and for measured kernel speeds (and how docs name it)."""

    vendor: str
    model_name: str
    family: str
    model: str
    flags_digest: str
    """A digest of the instruction-set flags (two CPUs of one model name can differ, e.g. under a VM)."""
    logical_cpus: int
    vector_unit: str
    """The widest vector instructions: ``AVX-512``, ``AVX2``, ``NEON``, or ``no AVX2``."""

    def describe(self) -> str:
        return f"{self.model_name} ({self.vendor}, family {self.family}, model {self.model}, {self.logical_cpus} CPUs)"


def _vector_unit(flags: set[str]) -> str:
    if "avx512f" in flags:
        return "AVX-512"
    if "avx2" in flags:
        return "AVX2"
    return "NEON" if {"asimd", "neon"} & flags else "no AVX2"


@functools.cache
def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (empty where there is none)."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, sep, value = line.partition(":")
            key = key.strip()
            if sep and key not in fields:
                fields[key] = value.strip()
    return fields


def cpu_flags() -> frozenset[str]:
    """The CPU's instruction-set flags as ``/proc/cpuinfo`` names them (``avx2``, ``avx512f``, ...)."""
    fields = _cpuinfo()
    return frozenset((fields.get("flags") or fields.get("Features") or "").split())


@functools.cache
def cpu_identity() -> CpuIdentity:
    """This machine's CPU (from ``/proc/cpuinfo`` on Linux, ``platform`` elsewhere)."""
    fields = _cpuinfo()
    flags = sorted(cpu_flags())
    return CpuIdentity(
        vendor=fields.get("vendor_id") or fields.get("CPU implementer") or platform.machine(),
        model_name=fields.get("model name") or platform.processor() or platform.machine(),
        family=fields.get("cpu family") or fields.get("CPU architecture") or "",
        model=fields.get("model") or fields.get("CPU part") or "",
        flags_digest=hashlib.sha256(" ".join(flags).encode()).hexdigest()[:12],
        logical_cpus=os.cpu_count() or 1,
        vector_unit=_vector_unit(set(flags)),
    )
