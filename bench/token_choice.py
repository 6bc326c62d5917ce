"""Token choice alone: the engine's ``choose_tokens`` against the full-scan inverse CDF it replaced.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/token_choice.py [--rows 1,8,32,64] [--vocab 49152] [--calls 30]

Both pick one token per row from random logits (SmolLM2's vocabulary size by default) at temperature
0.7, each row drawing from its own generator. The full scan is the algorithm ``choose_tokens`` used
before the blocked search: a log-softmax pass (logsumexp, subtract, exp), a cumulative sum over the whole
vocabulary per row, and one ``searchsorted``. The two alternate; the best of two medians of ``--calls``
calls is reported. The script restarts itself under jemalloc with envsuite's settings, as the
``envsuite`` command does (under glibc's malloc the 64-row tensors are page-faulted afresh each call).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import torch

from envsuite.engine import jemalloc_loaded, reexec_under_jemalloc
from envsuite.engine.sampling import RowSampling, choose_tokens, make_generator


def full_scan(logits_B_V: torch.Tensor, rows: Sequence[RowSampling]) -> torch.Tensor:
    """The replaced sampler (temperature only): log-softmax, a full cumulative sum, one search."""
    temperatures = torch.tensor([row.temperature for row in rows])
    scaled_B_V = logits_B_V / temperatures[:, None]
    log_norm_B = torch.logsumexp(scaled_B_V, dim=-1, keepdim=True)
    cdf_B_V = torch.exp(scaled_B_V - log_norm_B).cumsum(dim=-1)
    draws = [1.0 - float(torch.rand((), generator=row.generator).item()) for row in rows]
    targets_B = (torch.tensor(draws) * cdf_B_V[:, -1]).unsqueeze(1)
    chosen_B = torch.searchsorted(cdf_B_V, targets_B).squeeze(1).clamp_(max=logits_B_V.shape[1] - 1)
    logprobs_B = scaled_B_V.gather(1, chosen_B[:, None]).squeeze(1) - log_norm_B.squeeze(1)
    return torch.stack([chosen_B.float(), logprobs_B])


def _median_ms(fn: Callable[[], object], calls: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", default="1,8,32,64")
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    reexec_under_jemalloc(sys.orig_argv[1:])
    print(
        f"allocator: {'jemalloc' if jemalloc_loaded() else 'the system malloc'}, {torch.get_num_threads()} threads"
    )
    print(f"{'rows':>5} {'full scan':>11} {'blocked':>9}")
    for count in (int(r) for r in args.rows.split(",")):
        logits = torch.randn(count, args.vocab, generator=torch.Generator().manual_seed(count)) * 3
        rows = [RowSampling(0.7, -1, 1.0, make_generator(i)) for i in range(count)]
        scan, blocked = [], []
        for _ in range(2):
            scan.append(_median_ms(lambda: full_scan(logits, rows), args.calls))  # noqa: B023
            blocked.append(_median_ms(lambda: choose_tokens(logits, rows), args.calls))  # noqa: B023
        print(f"{count:5d} {min(scan):8.2f} ms {min(blocked):6.2f} ms")


if __name__ == "__main__":
    main()
