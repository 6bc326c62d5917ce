"""``envsuite bench`` while it runs: what it says about each env and about the whole run (both runners
report here).

In ``lines`` display mode (the default when the output is not a terminal) a session prints one line for
the plan (envs and episodes to play, what an earlier run already finished), a line per finished quarter
of an env's episodes (for envs of more than four), and one line when an env ends, naming it, with the
whole run's progress and an estimate of the time left ("[37/198 envs, 148/792 episodes, 4:10 elapsed,
~12:30 left]"). The estimate weighs each episode by its env's ``cost`` (the bench gives its family's mean
seconds per episode, ``evals.bench._budget``): a game costs several reasoning-gym tasks, so the fast
single-turn envs that finish first do not make the estimate of the games left too low. Inspect's plain
display cuts task names to 12 characters; these never do. In a terminal the direct runner shows one
overall bar with the same estimate and prints the end lines above it (``brief``). When an env ends the
session also runs ``after_task`` (the bench drops the model's cached conversations there). It only
reports: storing an env is the runner's job (``evals.bench._rows``), done before the runner says the env
ended.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from envsuite.display import printable

QUARTER_LINES_FROM = 5
"""Envs of at least this many episodes get a line per finished quarter; smaller ones one at the end."""


@dataclass
class _TaskProgress:
    env_id: str
    total: int
    done: int = 0
    reward_sum: float = 0.0
    started: float = field(default_factory=time.monotonic)
    first: float | None = None
    """When its first episode began (envs wait for room among the episodes in flight)."""
    cost: float = 1.0
    """One episode's relative cost (the session's ``cost`` of its env)."""


@dataclass
class BenchSession:
    """One running bench's progress: where its lines go (None: quiet) and what to do as an env ends."""

    label: str
    say: Callable[[str], None] | None
    after_task: Callable[[], None] | None = None
    """Called when any task ends (whatever its status): the bench drops the model's cached
    conversations there, since an env's episodes never come back once its task is over."""
    brief: bool = False
    """Say only the plan and each env's end (a progress bar shows the rest)."""
    tasks: dict[str, _TaskProgress] = field(default_factory=dict)
    envs_total: int = 0
    episodes_total: int = 0
    """Episodes this run plays (resumed ones not counted): the estimate of the time left is on them."""
    envs_ended: int = 0
    episodes_played: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    """Envs that ended without a complete log, and why (a rerun plays them)."""
    started: float = field(default_factory=time.monotonic)
    cost: Callable[[str], float] | None = None
    """One episode's relative cost by env id (None: every episode the same); weighs the estimate."""
    work_total: float = 0.0
    """The episodes this run plays, each weighed by its cost."""
    work_done: float = 0.0

    def weigh(self, env_id: str) -> float:
        """One episode of ``env_id``'s relative cost."""
        return self.cost(env_id) if self.cost is not None else 1.0

    def plan(
        self,
        envs: int,
        episodes: int,
        *,
        resumed: int = 0,
        finished_envs: int = 0,
        to_play: Iterable[tuple[str, int]] | None = None,
    ) -> None:
        """What this run plays: ``envs`` envs, ``episodes`` episodes not played before; ``to_play`` says
        how many of them each env has (weighs the estimate of the time left; None: all the same)."""
        self.envs_total, self.episodes_total = envs, episodes
        self.work_total = (
            float(episodes) if to_play is None else sum(n * self.weigh(env) for env, n in to_play)
        )
        self.started = time.monotonic()
        earlier = []
        if finished_envs:
            earlier.append(f"{finished_envs} env(s) finished")
        if resumed:
            earlier.append(f"{resumed} episode(s) played")
        before = f" (an earlier run of this bench: {', '.join(earlier)})" if earlier else ""
        self._say(f"{self.label}: {envs} env(s), {episodes} episode(s) to play{before}")

    def task_started(self, eval_id: str, env_id: str, total: int) -> None:
        self.tasks[eval_id] = _TaskProgress(env_id, total, cost=self.weigh(env_id))

    def episode_started(self, eval_id: str) -> None:
        """An episode of the env began playing: an env's time runs from its first one."""
        task = self.tasks.get(eval_id)
        if task is not None and task.first is None:
            task.first = time.monotonic()

    def sample_ended(self, eval_id: str, reward: float | None, *, resumed: bool = False) -> None:
        task = self.tasks.get(eval_id)
        if task is None:
            return
        task.done += 1
        task.reward_sum += reward or 0.0
        if not resumed:
            self.episodes_played += 1
            self.work_done += task.cost
        quarters = task.total >= QUARTER_LINES_FROM and task.done % max(1, task.total // 4) == 0
        if not self.brief and (task.done == task.total or quarters):
            mean = task.reward_sum / task.done
            self._say(
                f"{self.label} on {task.env_id}: {task.done}/{task.total} episodes, mean reward {mean:+.3f}"
            )

    def task_ended(self, eval_id: str, log_name: str) -> None:
        """An env ended and is stored (its log is ``log_name``)."""
        task = self._ended(eval_id)
        mean = f", mean reward {task.reward_sum / task.done:+.3f}" if task and task.done else ""
        self._say(
            f"{self.label} on {self._env(task)}: finished in {self._seconds(task)}{mean}; stored in the "
            f"leaderboard (log {log_name}) {self.overall()}"
        )

    def task_failed(self, eval_id: str, status: str) -> None:
        """An env ended without a complete log: nothing of it is stored, and a rerun plays it."""
        task = self._ended(eval_id)
        if task is not None:  # its episodes left are not played in this run
            self.work_total -= max(task.total - task.done, 0) * task.cost
        self.failed[self._env(task)] = status
        self._say(
            f"{self.label} on {self._env(task)}: ended with status {status}; it reruns when the bench is "
            f"rerun {self.overall()}"
        )

    def env_skipped(self, env_id: str, why: str) -> None:
        """An env the bench could not set up: reported and left out (a rerun tries it again)."""
        self.failed[env_id] = why
        self._say(f"{self.label} on {env_id}: skipped: {why}")

    def eta_s(self) -> float | None:
        """Seconds left, from this run's weighed episodes per second so far (None before the first)."""
        if not self.episodes_played or self.work_done <= 0:
            return None
        rate = self.work_done / max(time.monotonic() - self.started, 1e-9)
        return max(self.work_total - self.work_done, 0.0) / rate

    def overall(self) -> str:
        """``[37/198 envs, 148/792 episodes, 4:10 elapsed, ~12:30 left]``."""
        if not self.envs_total:
            return ""
        eta = self.eta_s()
        left = f", ~{clock(eta)} left" if eta is not None and self.envs_ended < self.envs_total else ""
        return (
            f"[{self.envs_ended}/{self.envs_total} envs, {self.episodes_played}/{self.episodes_total} "
            f"episodes, {clock(time.monotonic() - self.started)} elapsed{left}]"
        )

    def _ended(self, eval_id: str) -> _TaskProgress | None:
        self.envs_ended += 1
        if self.after_task is not None:
            self.after_task()
        return self.tasks.get(eval_id)

    @staticmethod
    def _env(task: _TaskProgress | None) -> str:
        return task.env_id if task else "?"

    @staticmethod
    def _seconds(task: _TaskProgress | None) -> str:
        if task is None:
            return "?"
        return f"{time.monotonic() - (task.first or task.started):.1f} s"

    def _say(self, text: str) -> None:
        if self.say is not None:
            self.say(printable(text))


def clock(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` from an hour)."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def print_line(text: str) -> None:
    print(text, file=sys.stdout, flush=True)
