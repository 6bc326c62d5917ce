"""Every BFCL multi-turn entry's ground truth played through envsuite's env, scored by BFCL's checker.

For each category (``multi_turn_base``, ``_miss_func``, ``_miss_param``, ``_long_context``; 200 entries
each) and each entry, the env plays the ground truth as replies (per turn, one reply with its calls,
then one without a call that ends the turn) and BFCL's own multi-turn evaluation scores the episode.
Every entry must score 1; the ones that do not are printed with BFCL's reason. docs/benchmarks_standard.md
quotes the result.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bfcl_multi_turn.py [CATEGORY ...]
"""

from __future__ import annotations

import asyncio
import sys
import time

import envsuite
from envsuite.core import StepResult
from envsuite.envs.bfcl import MULTI_TURN_CATEGORIES, BfclMultiTurnEnv, env_id
from envsuite.renderers import reply_to_tokens

MODEL = "smollm2-135m-instruct"


async def play_reference(category: str, seed: int) -> StepResult | None:
    env = envsuite.make_env(env_id(category), seed=seed, model=MODEL)
    assert isinstance(env, BfclMultiTurnEnv)
    await env.initial_observation()
    for reply in env.reference_replies():
        result = await env.step(reply_to_tokens(env.renderer, reply))
        if result.episode_done:
            return result
    return None


def main(categories: list[str]) -> int:
    started, failed_total = time.perf_counter(), 0
    for category in categories:
        failed: list[tuple[int, str]] = []
        for seed in range(200):
            try:
                result = asyncio.run(play_reference(category, seed))
            except Exception as exc:  # a crash is a failure to report, not a reason to stop the sweep
                failed.append((seed, f"raised {type(exc).__name__}: {exc}"[:200]))
                continue
            if result is None or result.reward != 1.0:
                failed.append((seed, str(result.logs.get("grade")) if result else "episode not over"))
        failed_total += len(failed)
        seconds = time.perf_counter() - started
        print(f"{category}: the reference scored 1 on {200 - len(failed)} of 200 ({seconds:.0f} s so far)")
        for seed, why in failed[:10]:
            print(f"    seed {seed}: {why}")
    return 1 if failed_total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or list(MULTI_TURN_CATEGORIES)))
