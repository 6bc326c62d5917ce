"""The captured decode step as one team of threads against the same step op by op, in one process.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/decode_team.py [--rows 1,4,16,64] [--rounds 8] [--steps 10]
        [--json PATH]

``torch.ops.envsuite.decode_layers`` runs a step's layers and LM head as one parallel region (its
threads meeting at barriers between phases) where every product is on envsuite's panels, else op by op
(each kernel its own ``at::parallel_for``); ``ENVSUITE_DECODE_TEAM=0`` forces the second. This script
decodes SmolLM2-135M-Instruct (fp32, the engine's calibrated layout, all torch threads) both ways on
two prefilled batches of the same prompts, alternating ``--rounds`` times per row count (``--steps``
steps a round, median ms per step), so a drift in the machine's speed touches both alike, and reports
each round's ratio (team / op by op) and their median (``--rounds 0``: no alternation). Then, per row
count, it runs ``--steps`` more team steps with ``ENVSUITE_DECODE_TEAM_CLOCK=1`` and reports where the
team's time went (``envsuite.engine.kernels.read_team_clock``): per phase of the step (summed over the
layers), each thread's time working in it and waiting at the barrier that ends it, us per step. Which
phase to speed up, and how evenly the step's work is shared out.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _host import cpu_name  # noqa: E402
from decode import _median_ms, _prompts, _rows, _step, build_way, team_clock  # noqa: E402

from envsuite.engine.kernels import TEAM_PHASES, TeamClock  # noqa: E402
from envsuite.engine.sampling._kv_batch import prefill  # noqa: E402

SWITCH = "ENVSUITE_DECODE_TEAM"
WAYS = {"by_op": "0", "team": "1"}


def timed_round(step: Callable[[], None], steps: int) -> float:
    """Median ms of ``steps`` steps after two unmeasured ones."""
    for _ in range(2):
        step()
    return _median_ms(step, steps)


def clock_lines(clock: TeamClock) -> list[str]:
    """One line per phase: each thread's working / waiting us per step."""
    lines = []
    for phase in TEAM_PHASES:
        cells = "  ".join(
            f"{clock.working_us(t)[phase]:7.0f} / {clock.waiting_us(t)[phase]:5.0f}"
            for t in range(clock.threads)
        )
        lines.append(f"    {phase:>10}: {cells}")
    totals = "  ".join(
        f"{sum(clock.working_us(t).values()):7.0f} / {sum(clock.waiting_us(t).values()):5.0f}"
        for t in range(clock.threads)
    )
    lines.append(f"    {'step':>10}: {totals}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,4,16,64")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--json", type=Path, default=Path("artifacts/decode_team.json"))
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}; torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    way = build_way("calibrated", Path("artifacts") / f"kernel-cache-{os.getpid()}")
    assert way.decoder.captured is not None, "the captured step needs the native kernels"
    result: dict[str, object] = {"cpu": cpu_name(), "threads": torch.get_num_threads(), "rows": {}}
    before = os.environ.get(SWITCH)
    try:
        with torch.inference_mode():
            for rows in (int(r) for r in args.rows.split(",")):
                prompts = _prompts(rows, 48, int(way.model.config.vocab_size), seed=rows)
                batches = {name: prefill(way.model, prompts, False).batch for name in WAYS}
                samplings = _rows(rows)
                ms: dict[str, list[float]] = {name: [] for name in WAYS}
                for _ in range(args.rounds):
                    for name, value in WAYS.items():
                        os.environ[SWITCH] = value
                        step = functools.partial(_step, way.model, batches[name], way.decoder, samplings)
                        ms[name].append(timed_round(step, args.steps))
                ratios = [team / by_op for team, by_op in zip(ms["team"], ms["by_op"], strict=True)]
                os.environ[SWITCH] = "1"
                clock = team_clock(
                    functools.partial(_step, way.model, batches["team"], way.decoder, samplings), args.steps
                )
                result["rows"][str(rows)] = {  # type: ignore[index]
                    "ms": ms,
                    "ratios": ratios,
                    "clock_us": {
                        "working": [clock.working_us(t) for t in range(clock.threads)],
                        "waiting": [clock.waiting_us(t) for t in range(clock.threads)],
                    },
                }
                if ratios:
                    print(
                        f"{rows:3d} rows: by op {statistics.median(ms['by_op']):6.2f} ms, team "
                        f"{statistics.median(ms['team']):6.2f} ms; team / by op per round "
                        f"{min(ratios):.3f}-{max(ratios):.3f}, median {statistics.median(ratios):.3f}",
                        flush=True,
                    )
                print(
                    f"{rows:3d} rows, the team's phases, us per step working / waiting, per thread:",
                    flush=True,
                )
                print("\n".join(clock_lines(clock)), flush=True)
    finally:
        if before is None:
            os.environ.pop(SWITCH, None)
        else:
            os.environ[SWITCH] = before
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
