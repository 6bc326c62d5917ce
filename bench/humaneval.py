"""HumanEval pass@1 (and pass@k) of a model over all 164 problems, graded in envsuite's sandbox.

Every problem is one group of ``--samples`` episodes of the ``humaneval`` env (``problem=i``), sampled by
the local backend (SmolLM2-135M-Instruct by default; greedy with ``--temperature 0``), each reply's code
run against the problem's tests in a bubblewrap sandbox. Reports pass@k for k = 1 and ``--samples``
(``envsuite.stats``: the unbiased estimator, bootstrap 95% intervals over problems) and the wall time
(sampling and grading overlap: groups are graded as their replies come in). Goal (issue 35): all 164 problems in <= 10 min here.

    flock -x /tmp/cpu.lock .venv/bin/python bench/humaneval.py --samples 1 --temperature 0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from _host import cpu_name
from rich.progress import Progress

from envsuite import RendererConfig, make_group_builder
from envsuite.backends import sampling_client_for
from envsuite.completers import SamplingTokenCompleter
from envsuite.envs.code import N_PROBLEMS
from envsuite.rollouts import GroupRolloutResult, RolloutLimits, do_group_rollout
from envsuite.stats import ProblemSamples, sampled_metrics


async def _run(args: argparse.Namespace) -> tuple[list[GroupRolloutResult], float]:
    renderer = RendererConfig(model_name=args.model)
    policy = SamplingTokenCompleter(
        sampling_client_for(args.model), max_tokens=args.max_tokens, temperature=args.temperature
    )
    builders = [
        make_group_builder("humaneval", group_size=args.samples, seed=i, renderer=renderer, problem=i)
        for i in range(args.problems)
    ]
    limits = RolloutLimits(max_turns=1)
    started = time.perf_counter()
    with Progress(transient=True) as progress:
        task = progress.add_task("HumanEval", total=len(builders))

        async def one(builder: Any) -> GroupRolloutResult:
            result = await do_group_rollout(builder, policy, limits)
            progress.advance(task)
            return result

        results = await asyncio.gather(*(one(b) for b in builders))
    return list(results), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--samples", type=int, default=1, help="samples per problem (n of pass@k)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--problems", type=int, default=N_PROBLEMS, help="the first N problems (default all)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    results, seconds = asyncio.run(_run(args))
    problems, failed = [], 0
    for result in results:
        if result.group is None:
            failed += 1
            continue
        finals = [t.transitions[-1] for t in result.group.trajectories_G]
        problems.append(ProblemSamples(tuple(f.metrics.get("correct", 0.0) == 1.0 for f in finals)))
    report: dict[str, Any] = {
        "model": args.model,
        "problems": len(problems),
        "failed_groups": failed,
        "samples": args.samples,
        "temperature": args.temperature,
        "max_tokens": args.max_tokens,
        "wall_s": round(seconds, 1),
        "cpu": cpu_name(),
        "load_before": [round(x, 2) for x in load_before],
    }
    for k in sorted({1, args.samples}):
        metrics = sampled_metrics(problems, k)
        est = metrics.pass_at_k
        report[f"pass@{k}"] = {"mean": round(est.mean, 4), "lo": round(est.lo, 4), "hi": round(est.hi, 4)}
        print(f"pass@{k}: {est.mean:.3f} [{est.lo:.3f}, {est.hi:.3f}] over {est.n} problems", file=sys.stderr)
    print(f"wall {seconds:.1f} s", file=sys.stderr)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
