"""A judge as an env's partner: named by a model, given as any completer, or absent.

A judged env takes its judge as a keyword argument, as twenty questions takes its answerer, so the
judge travels in the env's kwargs (plain data: a model name pickles, a loaded model does not) and its
identity goes into the env's ``answerer_identity``, which result keys record: scores from different
judges never pool, and a judge-less run (``judge=None``, code criteria only) is ``judge:none``.

A judge named by a string is a local model judging greedily, loaded once per process for each
(model, cache file) pair: every env of a run, and every member of a group, asks the same judge, and
its verdicts are cached in the SQLite file ``judge_cache`` (in memory for the process when none is
given), so an episode judged twice asks the judge once.
"""

from __future__ import annotations

import threading

from envsuite.core import MessageCompleter
from envsuite.rubrics._judge import JudgeModel, JudgmentCache, local_judge

NO_JUDGE = "none"
"""The judge name (and identity) of a judge-less run: only code criteria score."""
MEMORY_CACHE = ":memory:"
"""SQLite's in-memory database: a shared judge's cache when no file is named."""

JudgeRef = str | MessageCompleter | JudgeModel | None
"""What a judged env's ``judge`` keyword takes: a local model's name, a completer, a judge, or None."""

_SHARED: dict[tuple[str, str | None], JudgeModel] = {}
_SHARED_LOCK = threading.Lock()


def shared_judge(model: str, cache: str | None = None) -> JudgeModel:
    """The local model ``model`` as a greedy judge, loaded on first use in this process for each
    (model, cache); its verdicts are kept in the SQLite file ``cache``, else in memory."""
    with _SHARED_LOCK:
        if (model, cache) not in _SHARED:
            judge = local_judge(model, cache)
            if judge.cache is None:
                judge.cache = JudgmentCache(MEMORY_CACHE)
            _SHARED[model, cache] = judge
        return _SHARED[model, cache]


def forget_shared_judges() -> None:
    """Drop this process's shared judges (the next use loads a fresh one over the same cache file)."""
    with _SHARED_LOCK:
        _SHARED.clear()


def as_judge(judge: JudgeRef, cache: str | None = None) -> JudgeModel | None:
    """The judge ``judge`` names: None (or ``"none"``) for no judge, a model name for a shared local
    judge, a completer wrapped with the ``cache`` file when given, a :class:`JudgeModel` as it is."""
    if judge is None or judge == NO_JUDGE:
        return None
    if isinstance(judge, JudgeModel):
        return judge
    if isinstance(judge, str):
        return shared_judge(judge, cache)
    if isinstance(judge, MessageCompleter):
        return JudgeModel(judge, JudgmentCache(cache) if cache else None)
    raise TypeError(f"judge must be a model name, a MessageCompleter, a JudgeModel or None, not {judge!r}")


def judge_identity(judge: JudgeModel | None) -> str:
    """What a result key records of the judge: its completer's identity, or ``none``."""
    return judge.identity() if judge is not None else NO_JUDGE
