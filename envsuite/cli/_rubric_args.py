"""``--rubric FILE`` (with ``--judge MODEL``, ``--judge-cache FILE``): a rubric attached to a command's env.

Shared by the commands that make an env so that each adds the same flags and builds the same judge: a
local model judging greedily, its verdicts cached in SQLite when ``--judge-cache`` is given.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envsuite.rubrics import JudgeModel, Rubric, RubricScore


def add_rubric_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rubric", default=None, metavar="FILE", help="score the final reply with a rubric (TOML/JSON)"
    )
    p.add_argument(
        "--judge", default="smollm2-135m-instruct", help="the rubric's judge model (a local model)"
    )
    p.add_argument("--judge-cache", default=None, metavar="FILE", help="SQLite cache of the judge's verdicts")


def build_judge(args: argparse.Namespace, rubric: Rubric) -> JudgeModel | None:
    """The judge the flags name, or None when the rubric has no judge criteria (no model is loaded)."""
    if not rubric.has_judge:
        return None
    from envsuite.rubrics import local_judge

    return local_judge(args.judge, args.judge_cache)


async def score_reply(args: argparse.Namespace, prompt: str, reply: str) -> tuple[Rubric, RubricScore]:
    """The ``--rubric``'s score of one (prompt, reply)."""
    from envsuite.rubrics import Scored, load_rubric, score_group

    rubric = load_rubric(args.rubric)
    (score,) = await score_group(rubric, [Scored(prompt, reply)], build_judge(args, rubric))
    return rubric, score
