"""Progress of a direct bench in a terminal: a bar per env with its mean reward so far."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envsuite.evals._direct import EnvRun

EpisodeCallback = Callable[["EnvRun"], None]


@contextlib.contextmanager
def direct_progress(display: str, runs: list[EnvRun]) -> Iterator[EpisodeCallback | None]:
    """Rich bars for Inspect's terminal displays (``full``, ``rich``, ``plain``); nothing for ``lines``
    (the bench session prints those) or ``none``. Yields the callback to call after each episode."""
    if display not in ("full", "rich", "plain") or not runs:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    # A console of our own: Inspect reconfigures rich's global one for its displays.
    with Progress(*columns, console=Console()) as progress:
        bars = {run.env_id: progress.add_task(run.env_id, total=len(run.seeds)) for run in runs}

        def on_episode(run: EnvRun) -> None:
            rewards = [record.reward for record in run.records.values()]
            mean = sum(rewards) / len(rewards) if rewards else 0.0
            progress.update(
                bars[run.env_id],
                completed=len(run.records),
                description=f"{run.env_id}  mean reward {mean:+.3f}",
            )

        for run in runs:
            on_episode(run)  # resumed episodes count from the start
        yield on_episode
