"""The Python around the native decode step: the input embedding and the rotary values, each both ways.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/step_overhead.py [--rows 1,16] [--rounds 8] [--steps 10]
        [--json PATH]

A decode step of SmolLM2-135M-Instruct (fp32, the engine's calibrated layout, the captured step, all
torch threads) spends about a millisecond outside its native call at 16 rows (docs/benchmarks.md).
This script times two of those pieces inside real steps, each call timed as it runs in the step (on
the caches the step's weights have just flushed), both ways alternating ``--rounds`` times per row
count on batches of the same prompts (``--steps`` steps a round, median per round, then the median of
the rounds):

* the input embedding, tied to the LM head's panels: ``torch.ops.envsuite.panel_rows`` (the engine's)
  against torch's indexing ``panels[ids // 16, :, ids % 16]`` (before it);
* the rotary cosines and sines: the decoder's ``RotaryTable`` (the engine's, where it applies) against
  the model's rotary module called every step (before it).

It checks that both ways give the same values.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _host import cpu_name  # noqa: E402
from decode import _prompts, _rows, _step, build_way  # noqa: E402

from envsuite.engine.kernels import PanelEmbedding  # noqa: E402
from envsuite.engine.sampling._kv_batch import prefill  # noqa: E402


def _torch_indexing(self: PanelEmbedding, input_ids: torch.Tensor) -> torch.Tensor:
    """The embedding as it was read before ``panel_rows``."""
    block = self.panels.shape[2]
    return self.panels[input_ids // block, :, input_ids % block]


class _Timed:
    """Wraps a callable, keeping the seconds of each call."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.seconds: list[float] = []

    def __call__(self, *args: Any) -> Any:
        started = time.perf_counter()
        out = self.fn(*args)
        self.seconds.append(time.perf_counter() - started)
        return out


def _alternate(
    way: Any, rows: int, rounds: int, steps: int, ways: dict[str, Callable[[bool], _Timed]]
) -> dict[str, float]:
    """Median ms per call of each way (``ways[name](on)`` installs it when ``on``, restores when not)."""
    model, decoder = way.model, way.decoder
    prompts = _prompts(rows, 80, int(model.config.vocab_size), seed=rows)
    samplings = _rows(rows)
    with torch.inference_mode():
        batches = {name: prefill(model, prompts, False).batch for name in ways}
        per_round: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(rounds):
            for name, install in ways.items():
                timed = install(True)
                for _ in range(2):
                    _step(model, batches[name], decoder, samplings)
                timed.seconds.clear()
                for _ in range(steps):
                    _step(model, batches[name], decoder, samplings)
                install(False)
                per_round[name].append(1000 * statistics.median(timed.seconds))
    return {name: statistics.median(values) for name, values in per_round.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,16")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--json", type=Path, default=Path("artifacts/step_overhead.json"))
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}; torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    way = build_way("calibrated", Path("artifacts") / f"kernel-cache-{os.getpid()}")
    decoder = way.decoder
    assert decoder.captured is not None, "the captured step needs the native kernels"
    embedding, table, module = decoder.embed, decoder.rotary_table, decoder.rotary
    assert isinstance(embedding, PanelEmbedding) and table is not None
    ids = torch.randint(0, embedding.num_embeddings, (16, 1))
    assert torch.equal(embedding(ids), _torch_indexing(embedding, ids))
    positions = torch.arange(0, 300, 7)
    cos, sin = module(torch.empty(0), positions[:, None])
    assert torch.equal(table(torch.empty(0), positions)[0], cos[:, 0])
    assert torch.equal(table(torch.empty(0), positions)[1], sin[:, 0])

    def embedding_way(forward: Callable[..., torch.Tensor]) -> Callable[[bool], _Timed]:
        def install(on: bool) -> _Timed:
            timed = _Timed(lambda ids: forward(embedding, ids))
            decoder.embed = timed if on else embedding  # type: ignore[assignment]
            return timed

        return install

    def rotary_way(use_table: bool) -> Callable[[bool], _Timed]:
        def install(on: bool) -> _Timed:
            timed = _Timed(table if use_table else module)
            if use_table:
                decoder.rotary_table = timed if on else table  # type: ignore[assignment]
            else:
                decoder.rotary_table = None if on else table
                decoder.rotary = timed if on else module  # type: ignore[assignment]
            return timed

        return install

    result: dict[str, Any] = {"cpu": cpu_name(), "threads": torch.get_num_threads(), "rows": {}}
    for rows in [int(r) for r in args.rows.split(",")]:
        embed_ms = _alternate(
            way,
            rows,
            args.rounds,
            args.steps,
            {
                "panel_rows": embedding_way(PanelEmbedding.forward),
                "torch_indexing": embedding_way(_torch_indexing),
            },
        )
        rotary_ms = _alternate(
            way, rows, args.rounds, args.steps, {"table": rotary_way(True), "module": rotary_way(False)}
        )
        result["rows"][rows] = {"embedding_ms": embed_ms, "rotary_ms": rotary_ms}
        print(
            f"rows {rows:3d}: embedding {embed_ms['panel_rows']:.3f} ms (torch indexing {embed_ms['torch_indexing']:.3f}), "
            f"rotary {rotary_ms['table']:.3f} ms (the module {rotary_ms['module']:.3f})",
            flush=True,
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
