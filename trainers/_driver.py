"""The step driver both trainers share (one policy, :class:`~envsuite.trainers._loop.Trainer`; a policy
per role, :class:`~envsuite.trainers._role_loop.RolePoliciesTrainer`).

It runs steps ``start .. n_steps - 1`` in order and owns what must be the same for both: a stop request
ends the run after the current step; each step's row goes to the metrics file and the trackers before
the step counts as done; a checkpoint is saved every ``save_every`` steps and at the last; a run that
ends early saves its last done step if no checkpoint holds it yet (so a rerun resumes there, never
earlier). A non-finite loss ends the run without saving (the step's update is suspect); the trainer's
``lost`` errors (the samplers are gone) save first, then end. The trainer says how to run a step, save
and report the outcome; the driver never looks inside a row or a checkpoint beyond its ``step``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from envsuite.trainers._clients import NonFiniteLoss
from envsuite.trainers._metrics import MetricsLog, Row
from envsuite.trainers._outcome import StopCause, TrainResult
from envsuite.trainers._report import progress
from envsuite.trainers._trackers import Trackers


class Saved(Protocol):
    """A checkpoint as the driver sees it: the number of steps it holds."""

    @property
    def step(self) -> int: ...


SavedT = TypeVar("SavedT", bound=Saved)


@dataclass(frozen=True)
class StepDriver(Generic[SavedT]):
    """What a trainer hands the driver: how to run one step, save, tell a stop request, and report."""

    one_step: Callable[[int], Awaitable[Row]]
    """Run step ``i``; its metrics row."""
    save: Callable[[int], Awaitable[SavedT]]
    """Save after ``done`` steps; the checkpoint."""
    finish: Callable[[StopCause, int, SavedT | None, str], TrainResult]
    """The run's result from its cause, steps done, last checkpoint and message."""
    stop_requested: Callable[[], bool]
    lost: tuple[type[Exception], ...] = ()
    """Errors that end the run with :attr:`StopCause.SAMPLERS_LOST` after saving the steps done."""


async def drive_steps(
    driver: StepDriver[SavedT],
    *,
    title: str,
    start: int,
    n_steps: int,
    save_every: int,
    last: SavedT | None,
    metrics: MetricsLog,
    trackers: Trackers,
    show_progress: bool,
) -> TrainResult:
    """Run the steps from ``start`` (``last``: the checkpoint the run resumed from, if any)."""
    done = start
    with progress(show_progress, title, n_steps, start) as advance:
        for step in range(start, n_steps):
            if driver.stop_requested():
                break
            try:
                row = await driver.one_step(step)
            except NonFiniteLoss as exc:
                return driver.finish(StopCause.NON_FINITE, done, last, f"stopped at step {step}: {exc}")
            except driver.lost as exc:
                if last is None or last.step < done:
                    last = await driver.save(done)
                return driver.finish(StopCause.SAMPLERS_LOST, done, last, f"stopped at step {step}: {exc}")
            metrics.append(row)
            trackers.log(row)
            done = step + 1
            if done % save_every == 0 or done == n_steps:
                last = await driver.save(done)
            advance(row)
    if last is None or last.step < done:
        last = await driver.save(done)
    if done < n_steps:
        return driver.finish(StopCause.INTERRUPTED, done, last, f"interrupted after {done} steps; saved")
    return driver.finish(StopCause.COMPLETED, done, last, f"completed {done} steps")
