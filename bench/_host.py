"""This machine as the benches name it (its CPU), and what the benches that run an ``envsuite`` command
as a child process share: its environment and the resident memory of its process tree. No torch here:
the benches that only start child processes stay light."""

from __future__ import annotations

import os

import psutil

from envsuite.engine import cpu_identity


def offline_env() -> dict[str, str]:
    """This process's environment, offline (no hub downloads) and without tokenizers' thread pool."""
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def tree_rss(process: psutil.Process) -> int:
    """Resident bytes of ``process`` and all its children (ones that exit while read are skipped)."""
    total = 0
    for proc in [process, *process.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


def cpu_name() -> str:
    """The CPU as docs name it: model name, family/model, and the widest vector unit."""
    cpu = cpu_identity()
    return f"{cpu.model_name} (family {cpu.family}, model {cpu.model}, {cpu.vector_unit}), {cpu.logical_cpus} CPUs"


def require_native_kernels() -> None:
    """Build or load envsuite's native CPU kernels, or exit saying why they are not here (the benches of
    those kernels have nothing to measure without them)."""
    from envsuite.engine.kernels import native_kernels  # torch: only for the benches that need it

    status = native_kernels()
    if not status.available:
        raise SystemExit(f"the native kernels are not built here: {status.reason}")
