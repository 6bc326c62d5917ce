"""``envsuite bench`` while it runs: each finished task is stored at once, and progress names the env.

Inspect calls these hooks from its own event loop for every eval in the process; they act only while a
bench is running (:func:`bench_session`). When a task ends its log is imported into the leaderboard
store right away, so a bench killed later keeps every finished env (``import_log`` is idempotent, so
the import at the end of the run adds nothing twice). In ``lines`` display mode (the default when the
output is not a terminal) they also print one line per finished episode and per finished env, naming
the env, instead of Inspect's plain display, which cuts task names to 12 characters.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inspect_ai.hooks import Hooks, SampleEnd, TaskEnd, TaskStart, hooks

from envsuite.display import printable


@dataclass
class _TaskProgress:
    env_id: str
    total: int
    done: int = 0
    reward_sum: float = 0.0


@dataclass
class BenchSession:
    """One running bench: what to do with a finished log, and where progress lines go (None: quiet)."""

    label: str
    on_log: Callable[[str], tuple[int, int]]
    """Import one finished log; returns (runs added, episodes added)."""
    say: Callable[[str], None] | None
    after_task: Callable[[], None] | None = None
    """Called when any task ends (whatever its status): the bench drops the model's cached
    conversations there, since an env's episodes never come back once its task is over."""
    tasks: dict[str, _TaskProgress] = field(default_factory=dict)
    imported: set[str] = field(default_factory=set)
    runs_added: int = 0
    episodes_added: int = 0

    def task_started(self, eval_id: str, env_id: str, total: int) -> None:
        self.tasks[eval_id] = _TaskProgress(env_id, total)
        self._say(f"{self.label} on {env_id}: {total} episode(s) to play")

    def sample_ended(self, eval_id: str, reward: float | None) -> None:
        task = self.tasks.get(eval_id)
        if task is None:
            return
        task.done += 1
        task.reward_sum += reward or 0.0
        # About four lines per env (and every episode of small runs), so long benches stay readable.
        if task.done == task.total or task.done % max(1, task.total // 4) == 0:
            mean = task.reward_sum / task.done
            self._say(
                f"{self.label} on {task.env_id}: {task.done}/{task.total} episodes, mean reward {mean:+.3f}"
            )

    def task_ended(self, eval_id: str, location: str, status: str) -> None:
        if self.after_task is not None:
            self.after_task()
        task = self.tasks.get(eval_id)
        env_id = task.env_id if task else "?"
        if status != "success" or not location:
            self._say(
                f"{self.label} on {env_id}: ended with status {status}; it reruns when the bench is rerun"
            )
            return
        self.import_once(location)
        self._say(
            f"{self.label} on {env_id}: finished; stored in the leaderboard (log {Path(location).name})"
        )

    def import_once(self, location: str) -> None:
        if location in self.imported:
            return
        runs, episodes = self.on_log(location)
        self.imported.add(location)
        self.runs_added += runs
        self.episodes_added += episodes

    def _say(self, text: str) -> None:
        if self.say is not None:
            self.say(printable(text))


_ACTIVE: BenchSession | None = None


@contextlib.contextmanager
def bench_session(session: BenchSession) -> Iterator[BenchSession]:
    """Make ``session`` the one the hooks serve while the ``with`` block runs."""
    global _ACTIVE
    previous, _ACTIVE = _ACTIVE, session
    try:
        yield session
    finally:
        _ACTIVE = previous


def print_line(text: str) -> None:
    print(text, file=sys.stdout, flush=True)


def _reward(sample: Any) -> float | None:
    for score in (sample.scores or {}).values():
        value = score.value
        if isinstance(value, dict) and isinstance(value.get("reward"), int | float):
            return float(value["reward"])
    return None


@hooks(
    name="envsuite_bench",
    description="envsuite bench: store each finished env at once, name envs in progress",
)
class BenchHooks(Hooks):
    def enabled(self) -> bool:
        return _ACTIVE is not None

    async def on_task_start(self, data: TaskStart) -> None:
        if _ACTIVE is not None:
            env_id = str((data.spec.task_args or {}).get("env_id") or data.spec.task)
            _ACTIVE.task_started(data.eval_id, env_id, int(data.spec.dataset.samples or 0))

    async def on_sample_end(self, data: SampleEnd) -> None:
        if _ACTIVE is not None:
            _ACTIVE.sample_ended(data.eval_id, _reward(data.sample))

    async def on_task_end(self, data: TaskEnd) -> None:
        if _ACTIVE is not None:
            _ACTIVE.task_ended(data.eval_id, str(data.log.location or ""), str(data.log.status))
