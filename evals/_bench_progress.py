"""``envsuite bench`` while it runs: what it says about each env (both runners report here).

In ``lines`` display mode (the default when the output is not a terminal) a session prints about four
lines per env as its episodes finish and one when it ends, naming the env, instead of Inspect's plain
display, which cuts task names to 12 characters. When an env ends the session also runs ``after_task``
(the bench drops the model's cached conversations there). It only reports: storing an env is the
runner's job (``evals._bench_rows``), done before the runner says the env ended.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from envsuite.display import printable


@dataclass
class _TaskProgress:
    env_id: str
    total: int
    done: int = 0
    reward_sum: float = 0.0


@dataclass
class BenchSession:
    """One running bench's progress: where its lines go (None: quiet) and what to do as an env ends."""

    label: str
    say: Callable[[str], None] | None
    after_task: Callable[[], None] | None = None
    """Called when any task ends (whatever its status): the bench drops the model's cached
    conversations there, since an env's episodes never come back once its task is over."""
    tasks: dict[str, _TaskProgress] = field(default_factory=dict)

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

    def task_ended(self, eval_id: str, log_name: str) -> None:
        """An env ended and is stored (its log is ``log_name``)."""
        env_id = self._ended(eval_id)
        self._say(f"{self.label} on {env_id}: finished; stored in the leaderboard (log {log_name})")

    def task_failed(self, eval_id: str, status: str) -> None:
        """An env ended without a complete log: nothing of it is stored, and a rerun plays it."""
        env_id = self._ended(eval_id)
        self._say(f"{self.label} on {env_id}: ended with status {status}; it reruns when the bench is rerun")

    def _ended(self, eval_id: str) -> str:
        if self.after_task is not None:
            self.after_task()
        task = self.tasks.get(eval_id)
        return task.env_id if task else "?"

    def _say(self, text: str) -> None:
        if self.say is not None:
            self.say(printable(text))


def print_line(text: str) -> None:
    print(text, file=sys.stdout, flush=True)
