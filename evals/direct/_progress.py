"""Progress of a direct bench in a terminal: one bar for the whole run, with the time left, and a line
above it as each env ends (the bench session's end lines)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envsuite.evals.bench._progress import BenchSession
    from envsuite.evals.direct._runner import EnvRun

EpisodeCallback = Callable[["EnvRun"], None]


@contextlib.contextmanager
def direct_progress(
    display: str, runs: list[EnvRun], session: BenchSession
) -> Iterator[EpisodeCallback | None]:
    """A rich bar for Inspect's terminal displays (``full``, ``rich``, ``plain``); nothing for ``lines``
    (the bench session prints those) or ``none``. Yields the callback to call after each episode.

    The bar counts the episodes this run plays (resumed ones are done already) and shows the session's
    estimate of the time left (episodes weighed by their family's cost, ``evals.bench._progress``);
    while it shows, the session says only the plan and each env's end, printed above the bar."""
    if display not in ("full", "rich", "plain") or not runs:
        yield None
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("episodes"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[left]}"),
    )
    # A console of our own: Inspect reconfigures rich's global one for its displays.
    with Progress(*columns, console=Console()) as progress:
        total = sum(len(run.pending()) for run in runs)
        bar = progress.add_task(_description(session), total=total, left=_time_left(session))
        said, brief = session.say, session.brief

        def say(text: str) -> None:
            progress.console.print(escape(text))
            progress.update(bar, description=_description(session), left=_time_left(session))

        def on_episode(run: EnvRun) -> None:
            progress.update(
                bar,
                completed=session.episodes_played,
                description=_description(session),
                left=_time_left(session),
            )

        session.say, session.brief = say, True

        try:
            yield on_episode
        finally:
            session.say, session.brief = said, brief


def _time_left(session: BenchSession) -> str:
    """``~12:30 left`` (``-:-- left`` before the first episode ends; ``0:00 left`` once all have)."""
    from envsuite.evals.bench._progress import clock

    if session.envs_total and session.envs_ended >= session.envs_total:
        return "0:00 left"
    eta = session.eta_s()
    return "-:-- left" if eta is None else f"~{clock(eta)} left"


def _description(session: BenchSession) -> str:
    return f"{session.label}: {session.envs_ended}/{session.envs_total} envs"
