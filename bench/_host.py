"""This machine as the benches name it (its CPU), and what the benches that run an ``envsuite`` command
as a child process share: its environment and the resident memory of its process tree. No torch here:
the benches that only start child processes stay light."""

from __future__ import annotations

import os

import psutil


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
    """The CPU as docs name it: model name, family/model, and the widest vector unit (from /proc/cpuinfo)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        return "unknown CPU"
    flags = fields.get("flags", "").split()
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return (
        f"{fields.get('model name', 'unknown CPU')} (family {fields.get('cpu family', '?')}, "
        f"model {fields.get('model', '?')}, {vector}), {os.cpu_count()} CPUs"
    )
