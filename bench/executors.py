"""`envsuite bench` episodes per second through each executor: in process, a process pool and Ray,
with 1 and 2 workers, on the same envs, seeds and model.

Every run is a fresh bench (its own log dir and store, so nothing is resumed). The model answers from
the driver (the envsuite provider over the local sampler); the envs (stepping, grading, partners, game
engines) play in the workers. Results are JSON lines; docs/benchmarks.md quotes them.

    .venv/bin/python bench/executors.py --model tiny-random --envs math twenty_questions tictactoe --episodes 24
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from envsuite.evals import BenchConfig, run_bench
from envsuite.executors import ExecutorConfig, ExecutorKind

SETTINGS = (
    ("inprocess", 1),
    ("process", 1),
    ("process", 2),
    ("ray", 1),
    ("ray", 2),
)


def measure(kind: str, workers: int, args: argparse.Namespace, root: Path) -> dict[str, object]:
    name = f"{kind}-{workers}"
    config = BenchConfig(
        model=args.model,
        env_ids=tuple(args.envs),
        episodes=args.episodes,
        max_tokens=args.max_tokens,
        log_root=str(root / name / "logs"),
        db=str(root / name / "board.sqlite"),
        display="none",
        executor=ExecutorConfig(ExecutorKind(kind), workers=workers),
    )
    started = time.perf_counter()
    report = run_bench(config)
    seconds = time.perf_counter() - started
    episodes = len(args.envs) * args.episodes
    return {
        "executor": kind,
        "workers": workers,
        "episodes": episodes,
        "stored": report.episodes_added,
        "seconds": round(seconds, 2),
        "episodes_per_s": round(episodes / seconds, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny-random")
    parser.add_argument("--envs", nargs="+", default=["math", "twenty_questions", "tictactoe"])
    parser.add_argument("--episodes", type=int, default=24, help="episodes per env")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--only", nargs="*", default=None, help="e.g. process-2 ray-1")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="envsuite-executors-") as tmp:
        for kind, workers in SETTINGS:
            if args.only and f"{kind}-{workers}" not in args.only:
                continue
            print(json.dumps(measure(kind, workers, args, Path(tmp))), flush=True)


if __name__ == "__main__":
    main()
