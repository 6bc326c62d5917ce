"""This machine's limits, measured where a benchmark runs: fp32 matmul peak, memory read bandwidth, load.

Shared by the bench scripts that compare against a roofline or report the load next to their numbers.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch
from _host import cpu_name  # noqa: F401  (re-exported: benches import it from here too)


@dataclass(frozen=True)
class Machine:
    matmul_gflops: float
    """Best fp32 matmul rate seen (2048^3 products, all torch threads), by either library below."""
    mkl_gflops: float
    """Through ``torch.mm`` (MKL's sgemm in torch's x86 builds)."""
    onednn_gflops: float
    """Through oneDNN (the op the lean decode step uses); 0 where torch has no oneDNN. On the AMD EPYC
    boxes MKL reached under half of oneDNN's rate, so a roofline from ``torch.mm`` alone is too low."""
    read_gbps: float
    """Best rate of summing a 512 MiB fp32 tensor (all torch threads)."""
    threads: int
    cores: int
    load_before: tuple[float, float, float]
    """1, 5 and 15 minute load averages before measuring."""


def load_average() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return (round(one, 2), round(five, 2), round(fifteen, 2))


def _best_seconds(fn: object, repeats: int) -> float:
    assert callable(fn)
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _product_gflops(left: torch.Tensor, right: torch.Tensor, onednn: bool, repeats: int) -> float:
    """GFLOP/s of ``left @ right`` (square), best of ``repeats``: through oneDNN's linear op (the one the
    lean decode step uses) or ``torch.mm`` (MKL's sgemm in torch's x86 builds)."""

    def product() -> object:
        if onednn:
            return torch.ops.mkldnn._linear_pointwise(left, right, None, "none", [], "")
        return left @ right

    return 2 * left.shape[0] ** 3 / _best_seconds(product, repeats) / 1e9


def _matmul_gflops(repeats: int, n: int = 2048) -> float:
    return _product_gflops(torch.randn(n, n), torch.randn(n, n), False, repeats)


def _onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _onednn_gflops(repeats: int, n: int = 2048) -> float:
    if not _onednn_available():
        return 0.0
    return _product_gflops(torch.randn(n, n), torch.randn(n, n), True, repeats)


class PeakProbe:
    """The fp32 matmul peak again, beside a measurement: the library that reached ``machine``'s peak
    (oneDNN or MKL), on the same 2048^3 product, its matrices made once. A shared VM's compute moves
    too (a neighbour on the sibling hyperthread): the bandwidth probe alone misses that."""

    def __init__(self, machine: Machine, n: int = 2048) -> None:
        self.left, self.right = torch.randn(n, n), torch.randn(n, n)
        self.onednn = _onednn_available() and machine.onednn_gflops >= machine.mkl_gflops

    def gflops(self, repeats: int = 2) -> float:
        return _product_gflops(self.left, self.right, self.onednn, repeats)


def read_rate(big: torch.Tensor, repeats: int = 3) -> float:
    """GB/s of summing ``big`` (a filled fp32 tensor much larger than the caches), best of ``repeats``."""
    return big.numel() * big.element_size() / _best_seconds(big.sum, repeats) / 1e9


def _read_gbps(repeats: int) -> float:
    big = torch.ones(512 * 1024 * 1024 // 4)  # filled, so every page is real memory
    return read_rate(big, repeats)


def measure_machine(repeats: int = 8) -> Machine:
    load = load_average()
    with torch.inference_mode():
        mkl = _matmul_gflops(repeats)
        onednn = _onednn_gflops(repeats)
        read = _read_gbps(repeats)
    return Machine(
        matmul_gflops=round(max(mkl, onednn), 1),
        mkl_gflops=round(mkl, 1),
        onednn_gflops=round(onednn, 1),
        read_gbps=round(read, 2),
        threads=torch.get_num_threads(),
        cores=os.cpu_count() or 1,
        load_before=load,
    )


if __name__ == "__main__":
    print(measure_machine())
