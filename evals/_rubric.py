"""A bench's rubric: the final reply of every played episode scored by a rubric, in both runners.

``envsuite bench --rubric FILE`` puts the rubric's content, the judge's name and the judgment cache's
path into the bench's settings (:class:`RubricSettings`, plain data: the Inspect task takes them as
arguments). Once an episode is played, the runner that played it (the Inspect solver ``play_env`` or
the direct runner) calls ``evals._task.score_episode``, in the driver, which asks :func:`rubric_score`: the rubric scores the episode's
final assistant reply against the last user or tool message before it, its reward is added to the
episode's, and its criteria go into the episode's metrics as ``rubric/<criterion>`` and
``rubric/reward``. An episode with no reply (the env failed first) is scored as the rubric scores an
empty reply. The judge model is loaded once per process for each (judge, cache) and only for a rubric
with judge criteria; its verdicts are cached in SQLite when a cache is given, so a second bench of the
same episodes asks the judge nothing.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envsuite import DEFAULT_MODEL

if TYPE_CHECKING:
    from envsuite.core import Message
    from envsuite.rubrics import JudgeModel, Rubric, RubricScore, Scored

_JUDGES: dict[tuple[str, str | None], JudgeModel] = {}
"""The judges this process loaded, by (judge model, cache path)."""
_JUDGES_LOCK = threading.Lock()


@dataclass(frozen=True)
class RubricSettings:
    """What scores a bench's episodes besides the env: a rubric's content and its judge."""

    rubric: dict[str, Any]
    """The rubric as :meth:`Rubric.to_dict` writes it (the settings record exactly which rubric)."""
    judge: str = DEFAULT_MODEL
    """The local model judging the rubric's judge criteria (unused by a rubric without them)."""
    judge_cache: str | None = None
    """SQLite file of the judge's verdicts (None: nothing is cached)."""

    def parsed(self) -> Rubric:
        from envsuite.rubrics import Rubric

        return Rubric.from_dict(self.rubric)


def task_args(settings: RubricSettings | None) -> dict[str, Any]:
    """The rubric's arguments of a bench's Inspect task (``envsuite_env``), as both runners' logs record
    them: plain data (the judge by name), None without a rubric."""
    if settings is None:
        return {"rubric": None, "judge": None, "judge_cache": None}
    return {"rubric": settings.rubric, "judge": settings.judge, "judge_cache": settings.judge_cache}


def judge_for(judge: str, cache: str | None) -> JudgeModel:
    """The judge ``judge`` with its verdicts cached at ``cache``, loaded on first use in this process."""
    from envsuite.rubrics import local_judge

    with _JUDGES_LOCK:
        if (judge, cache) not in _JUDGES:
            _JUDGES[judge, cache] = local_judge(judge, cache)
        return _JUDGES[judge, cache]


def final_exchange(conversation: list[Message]) -> Scored:
    """The episode's final assistant reply and the last user or tool message before it (empty text for
    whichever is missing)."""
    from envsuite.rubrics import Scored

    last = next(
        (i for i in range(len(conversation) - 1, -1, -1) if conversation[i]["role"] == "assistant"), None
    )
    if last is None:
        return Scored("", "")
    prompt = next((m["content"] for m in reversed(conversation[:last]) if m["role"] in ("user", "tool")), "")
    return Scored(str(prompt), str(conversation[last]["content"]))


async def rubric_score(settings: RubricSettings, conversation: list[Message]) -> RubricScore:
    """The rubric's score of the episode's final reply (what ``evals._task.score_episode`` adds to the
    episode's result)."""
    from envsuite.rubrics import score_group

    rubric = settings.parsed()
    judge = None
    if rubric.has_judge:  # the first episode loads the model, off the event loop
        judge = await asyncio.to_thread(judge_for, settings.judge, settings.judge_cache)
    (score,) = await score_group(rubric, [final_exchange(conversation)], judge)
    return score
