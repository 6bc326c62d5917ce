"""Adaptive curriculum: each env climbs (and descends) its difficulty rungs from its groups' running
success.

An env with rungs (:attr:`envsuite.EnvSpec.rungs`: reasoning-gym's curriculum levels, say) starts at
``start_rung``; every train group of it plays the current rung (the rung's keyword arguments over the
run's own for that env). After each step the success of each of its groups (the share of members whose
episode succeeded: the env's ``correct``/``success`` metric, else a positive return) goes into a window
of the last ``window`` groups; once the window is full, a rate of at least ``promote_at`` moves the env
one rung up and one under ``demote_below`` one rung down, and the window starts over at the new rung.
Envs without rungs train as they are. Held-out evaluations keep the run's own keyword arguments (the
target), so they stay paired across the run; ``eval_rungs`` adds a held-out set per rung.

Each step logs ``curriculum/<env>/rung`` (the rung it trained on), ``curriculum/<env>/success`` (the
window's rate) and ``curriculum/<env>/move`` (+1, -1 or 0), and appends the state to
``log_dir/curriculum.jsonl``, from which a resumed run continues exactly (lines past its checkpoint are
dropped, as ``metrics.jsonl``'s are).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envsuite.errors import UsageError
from envsuite.rollouts import episode_metrics

if TYPE_CHECKING:
    from envsuite.catalog.registration import EnvSpec
    from envsuite.core import EnvGroupBuilder, TrajectoryGroup

STATE_FILE = "curriculum.jsonl"
SUCCESS_KEYS = ("correct", "success")
"""Episode metrics read as success, first present wins (else a positive return)."""


@dataclass(frozen=True)
class Curriculum:
    """How envs move between their difficulty rungs during a run (``envsuite train --curriculum``)."""

    promote_at: float = 0.8
    """Running success rate at which an env moves one rung up."""
    demote_below: float = 0.2
    """Running success rate under which an env moves one rung down (0: never)."""
    window: int = 16
    """Groups in the running rate; a move needs this many at the current rung."""
    start_rung: int = 0
    """The rung every env starts at (an env with fewer rungs starts at its last)."""
    max_rung: int | None = None
    """The highest rung an env may reach (None: its last)."""

    def validate(self) -> None:
        """Raise a UsageError naming the setting to change."""
        if not 0 < self.promote_at <= 1:
            raise UsageError(f"curriculum promote_at must be in (0, 1], got {self.promote_at}")
        if not 0 <= self.demote_below < self.promote_at:
            raise UsageError(
                f"curriculum demote_below must be in [0, promote_at), got {self.demote_below} "
                f"(promote_at {self.promote_at})"
            )
        if self.window < 1:
            raise UsageError(f"curriculum window must be >= 1 group, got {self.window}")
        if self.start_rung < 0 or (self.max_rung is not None and self.max_rung < self.start_rung):
            raise UsageError(
                f"curriculum rungs: need 0 <= start_rung <= max_rung, got {self.start_rung} and {self.max_rung}"
            )

    @classmethod
    def from_value(cls, value: Curriculum | dict[str, Any] | None) -> Curriculum | None:
        """From a config file's table (unknown keys are an error naming them)."""
        if value is None or isinstance(value, Curriculum):
            return value
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise UsageError(f"unknown curriculum keys {unknown}; known: {sorted(names)}")
        return cls(**value)


@dataclass
class Ladder:
    """One env's place on its rungs."""

    label: str
    n_rungs: int
    top: int
    rung: int
    window: list[float] = field(default_factory=list)
    """Success of its latest groups at the current rung, oldest first."""


class CurriculumState:
    """The rungs of a run's envs: which one each trains on now, and the groups that will move it."""

    def __init__(self, config: Curriculum, specs: Sequence[EnvSpec]) -> None:
        self.config = config
        self.specs = {s.base_id: s for s in specs if s.rungs}
        if not self.specs:
            raise UsageError("--curriculum: none of the run's envs has difficulty rungs (`envsuite show ID`)")
        self.ladders: dict[str, Ladder] = {}
        for label, env_spec in self.specs.items():
            last = len(env_spec.rungs) - 1
            top = last if config.max_rung is None else min(config.max_rung, last)
            self.ladders[label] = Ladder(label, len(env_spec.rungs), top, min(config.start_rung, top))

    def apply(self, builders: Sequence[EnvGroupBuilder]) -> list[EnvGroupBuilder]:
        """The batch with each of the curriculum's envs at its current rung."""
        from envsuite import CatalogGroupBuilder

        out = []
        for builder in builders:
            ladder = self.ladders.get(group_label(builder))
            if ladder is not None and isinstance(builder, CatalogGroupBuilder):
                spec = self.specs[ladder.label]
                kwargs = {**builder.env_kwargs, **spec.rungs[ladder.rung].kwargs}
                builder = dataclasses.replace(builder, env_kwargs=kwargs)
            out.append(builder)
        return out

    def observe(
        self,
        builders: Sequence[EnvGroupBuilder],
        groups_P: Sequence[TrajectoryGroup],
        indices_P: Sequence[int],
    ) -> dict[str, float]:
        """Take a step's finished groups into the windows, move envs whose window says so, and return
        the step's metrics (the rung each env trained on, the rate, the move)."""
        row: dict[str, float] = {}
        trained = {label: ladder.rung for label, ladder in self.ladders.items()}
        for group, index in zip(groups_P, indices_P, strict=True):
            ladder = self.ladders.get(group_label(builders[index]))
            if ladder is not None:
                ladder.window = [*ladder.window, group_success(group)][-self.config.window :]
        for label, ladder in self.ladders.items():
            rate = sum(ladder.window) / len(ladder.window) if ladder.window else float("nan")
            move = self._move(ladder, rate)
            row[f"curriculum/{label}/rung"] = float(trained[label])
            row[f"curriculum/{label}/success"] = rate
            row[f"curriculum/{label}/move"] = float(move)
        return row

    def _move(self, ladder: Ladder, rate: float) -> int:
        if len(ladder.window) < self.config.window:
            return 0
        if rate >= self.config.promote_at and ladder.rung < ladder.top:
            ladder.rung, ladder.window = ladder.rung + 1, []
            return 1
        if rate < self.config.demote_below and ladder.rung > 0:
            ladder.rung, ladder.window = ladder.rung - 1, []
            return -1
        return 0

    # -- the run's file of states ----------------------------------------------------------------

    def save(self, log_dir: Path, step: int) -> None:
        """Append the state after ``step`` to ``log_dir/curriculum.jsonl`` (flushed to disk)."""
        state = {name: {"rung": lad.rung, "window": lad.window} for name, lad in self.ladders.items()}
        with (log_dir / STATE_FILE).open("a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, "ladders": state}, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def restore(self, log_dir: Path, next_step: int) -> None:
        """Continue from the state after step ``next_step - 1``, dropping any later lines."""
        path = log_dir / STATE_FILE
        lines = _read_lines(path)
        kept = [line for line in lines if isinstance(line.get("step"), int) and line["step"] < next_step]
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in kept), encoding="utf-8")
        os.replace(tmp, path)
        if next_step == 0:
            return
        last = next((line for line in reversed(kept) if line["step"] == next_step - 1), None)
        if last is None:
            raise UsageError(
                f"{path} has no curriculum state for step {next_step - 1}; resume in a new log_dir"
            )
        for label, saved in last["ladders"].items():
            if label in self.ladders:
                self.ladders[label].rung = int(saved["rung"])
                self.ladders[label].window = [float(v) for v in saved["window"]]


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = []
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
    return lines


def group_label(builder: EnvGroupBuilder) -> str:
    """The env a group comes from, as metrics name it (its first logging tag: the unversioned id)."""
    tags = builder.logging_tags()
    return tags[0] if tags else "env"


def group_success(group: TrajectoryGroup) -> float:
    """The share of a group's members whose episode succeeded."""
    wins = []
    for trajectory, total in zip(group.trajectories_G, group.get_total_rewards(), strict=True):
        metrics = episode_metrics(trajectory)
        key = next((k for k in SUCCESS_KEYS if k in metrics), None)
        wins.append(float(metrics[key] > 0) if key is not None else float(total > 0))
    return sum(wins) / len(wins) if wins else 0.0
