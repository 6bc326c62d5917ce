"""What a run says while it runs: one line per step in ``log_dir/train.log`` and on the console.

Every step writes a line (step, reward, success, test reward, time) to ``train.log`` through the
``envsuite.trainers`` logger, and failed groups (train or test) a warning with the first error, so a
run's history can be read without parsing ``metrics.jsonl``. On the console the same lines appear: as
a progress bar in a terminal, and as plain lines otherwise (a log file or a pipe sees every step as it
ends, not one bar at the very end). Error text passes through :func:`envsuite.display.printable`.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from envsuite.display import printable

LOGGER = logging.getLogger("envsuite.trainers")
Row = dict[str, float | int | str]


def step_line(env_id: str, row: Row, n_steps: int) -> str:
    """``GRPO on arithmetic: step 3/12 reward 0.412 success 0.50 test 0.300 (4.2 s)``."""
    parts = [f"GRPO on {env_id}: step {int(row['step']) + 1}/{n_steps}"]
    for key, label, spec in (("reward/mean", "reward", ".3f"), ("success", "success", ".2f")):
        value = row.get(key)
        if isinstance(value, float):
            parts.append(f"{label} {value:{spec}}")
    test = row.get("test/reward/mean")
    if isinstance(test, float):
        parts.append(f"test reward {test:.3f}")
    seconds = sum(float(v) for k, v in row.items() if k.startswith("time/") and isinstance(v, float))
    parts.append(f"({seconds:.1f} s)")
    return printable(" ".join(parts))


def failure_lines(row: Row) -> list[str]:
    """A warning per phase whose groups failed this step, with the first error."""
    lines = []
    for prefix, count_key, what in (("", "groups/failed", "train"), ("test/", "test/failed_groups", "test")):
        count = row.get(count_key)
        if isinstance(count, int) and count > 0:
            first = row.get(f"{prefix}error/first", "?")
            lines.append(printable(f"step {row['step']}: {count} {what} group(s) failed; first: {first}"))
    return lines


@contextlib.contextmanager
def run_log(path: Path) -> Iterator[None]:
    """Send the ``envsuite.trainers`` logger's records to ``path`` (appended) for the run's duration."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    handler.setLevel(logging.INFO)
    previous = LOGGER.level
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.INFO)
    try:
        yield
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(previous)
        handler.close()


@contextlib.contextmanager
def progress(enabled: bool, env_id: str, total: int, start: int) -> Iterator[Callable[[Row], None]]:
    """``report(row)`` after each step: logs it, and shows it (a bar in a terminal, lines otherwise)."""
    if not enabled:
        yield lambda row: _log(env_id, row, total)
        return
    if not sys.stdout.isatty():

        def plain(row: Row) -> None:
            _log(env_id, row, total)
            print(step_line(env_id, row, total), flush=True)
            for line in failure_lines(row):
                print(line, file=sys.stderr, flush=True)

        yield plain
        return
    yield from _bar(env_id, total, start)


def _bar(env_id: str, total: int, start: int) -> Iterator[Callable[[Row], None]]:
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    name = escape(printable(env_id))
    with Progress(
        TextColumn(f"[bold]GRPO[/bold] on {name} {{task.description}}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    ) as bar:
        task = bar.add_task("starting", total=total, completed=start)

        def advance(row: Row) -> None:
            _log(env_id, row, total)
            for line in failure_lines(row):
                bar.console.print(escape(line), style="yellow")
            reward = row.get("reward/mean")
            text = (
                f"step {row['step']} reward {reward:.3f}"
                if isinstance(reward, float)
                else f"step {row['step']}"
            )
            bar.update(task, advance=1, description=text)

        yield advance


def announce(show: bool, text: str) -> None:
    """A run-level event (start, resume, end): logged, and printed when progress is shown."""
    LOGGER.info(printable(text))
    if show:
        print(printable(text), flush=True)


def _log(env_id: str, row: Row, total: int) -> None:
    LOGGER.info(step_line(env_id, row, total))
    for line in failure_lines(row):
        LOGGER.warning(line)
