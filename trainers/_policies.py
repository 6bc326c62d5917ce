"""A policy per role: the ``policies`` a run names, each a LoRA adapter on the run's base model (or its own).

A run without policies trains one policy on every seat (the trainer as it always was). A run that names
policies gives each its own training client (adapter and optimizer state), advantages, datums,
checkpoints and metrics; each plays the seats it lists (``seats``), and a policy with
``trainable = false`` samples but is never trained. In a config file::

    [policies.asker]
    seats = [0]

    [policies.answerer]
    seats = [1]
    trainable = false          # frozen: the asker trains against the base model's answers
    learning_rate = 1e-4       # optional: the run's learning_rate otherwise
    # init_from = "runs/duel/checkpoints/.../step000040"   # optional: start from a saved state's weights
    # model = "smollm2-135m-instruct"   # optional: its own base model (the run's tokenizer); the run's otherwise
    # pool = ["runs/a/.../step000010", "runs/b/.../step000020"]  # frozen only: each group draws one of
    #                                                            # its own weights and these saved states

The loop is ``trainers._role_loop``; docs/training.md ("A policy per role") says what it does and does not.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envsuite.errors import UsageError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
"""A policy's name: it names a directory (``policies/<name>``) and metric keys (``policy/<name>/...``)."""


@dataclass(frozen=True)
class RolePolicy:
    """One policy of a run: which seats it plays, whether it trains, and its own learning rate."""

    name: str
    seats: tuple[int, ...]
    """The game seats this policy plays (seat ``i`` of a two-seat game is group member ``i % 2``)."""
    trainable: bool = True
    """False: the policy samples (its adapter as initialized: the base model) but is never trained."""
    learning_rate: float | None = None
    """This policy's peak learning rate (the run's schedule and warmup apply); None: the run's."""
    init_from: str | None = None
    """A ``save_state`` checkpoint this policy starts from (a ``state_path`` of an earlier run's
    ``checkpoints.jsonl`` or ``policies/<name>/checkpoints.jsonl``): its weights, with a fresh optimizer.
    None: a fresh adapter on the base model. A resumed run restores its own checkpoint instead."""
    model: str | None = None
    """This policy's own base model (None: the run's ``model``). It must have the run's model's tokenizer:
    the env renders every seat's prompt with the run's renderer (checked when the run opens it)."""
    pool: tuple[str, ...] = ()
    """An opponent pool for this role (frozen policies only): saved states that, with the policy's own
    weights (member 0), make the pool; each group's seats of this role are played by one member, drawn
    by the group's sampling seed (a rerun draws the same)."""

    def checks(self) -> list[tuple[bool, str]]:
        where = f"policies.{self.name}"
        lr = self.learning_rate
        return [
            (
                bool(_NAME.match(self.name)),
                f"policy name {self.name!r}: use letters, digits, '_' and '-' (it names a directory)",
            ),
            (bool(self.seats), f"{where}.seats is empty: list the seats it plays, e.g. seats = [0]"),
            (all(s >= 0 for s in self.seats), f"{where}.seats must be >= 0, got {list(self.seats)}"),
            (lr is None or (math.isfinite(lr) and lr > 0), f"{where}.learning_rate must be > 0, got {lr}"),
            (self.init_from is None or bool(self.init_from.strip()), f"{where}.init_from is empty"),
            (
                not self.pool or not self.trainable,
                f"{where}.pool needs trainable = false (an opponent pool is a frozen role's)",
            ),
            (all(path.strip() for path in self.pool), f"{where}.pool has an empty path"),
            (self.model is None or bool(self.model.strip()), f"{where}.model is empty"),
        ]

    def to_plain(self) -> dict[str, Any]:
        """The policy's table in ``config.json`` and config files (its name is the key)."""
        plain: dict[str, Any] = {
            "seats": list(self.seats),
            "trainable": self.trainable,
            "learning_rate": self.learning_rate,
        }
        plain |= {"init_from": self.init_from} if self.init_from is not None else {}
        plain |= {"model": self.model} if self.model is not None else {}
        return plain | ({"pool": list(self.pool)} if self.pool else {})


_FIELDS = ("seats", "trainable", "learning_rate", "init_from", "pool", "model")


def policy_from_table(name: str, table: object) -> RolePolicy:
    """``[policies.<name>]``'s table as a :class:`RolePolicy`; a wrong key or type is a UsageError."""
    if not isinstance(table, Mapping):
        raise UsageError(f"policies.{name} must be a table (seats = [0], ...), got {table!r}")
    unknown = sorted(set(table) - set(_FIELDS))
    if unknown:
        raise UsageError(f"policies.{name}: unknown keys {unknown}; known: {list(_FIELDS)}")
    seats = table.get("seats", [])
    if isinstance(seats, int) and not isinstance(seats, bool):
        seats = [seats]
    if not isinstance(seats, Sequence) or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in seats
    ):
        raise UsageError(f"policies.{name}.seats must be a list of seat numbers, got {seats!r}")
    trainable = table.get("trainable", True)
    if not isinstance(trainable, bool):
        raise UsageError(f"policies.{name}.trainable must be true or false, got {trainable!r}")
    lr = table.get("learning_rate")
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, int | float)):
        raise UsageError(f"policies.{name}.learning_rate must be a number, got {lr!r}")
    init_from, model = table.get("init_from"), table.get("model")
    if init_from is not None and not isinstance(init_from, str):
        raise UsageError(f"policies.{name}.init_from must be a checkpoint path, got {init_from!r}")
    if model is not None and not isinstance(model, str):
        raise UsageError(f"policies.{name}.model must be a model name or directory, got {model!r}")
    pool = table.get("pool", [])
    if isinstance(pool, str) or not isinstance(pool, Sequence) or not all(isinstance(p, str) for p in pool):
        raise UsageError(f"policies.{name}.pool must be a list of checkpoint paths, got {pool!r}")
    lr_value = None if lr is None else float(lr)
    return RolePolicy(name, tuple(seats), trainable, lr_value, init_from, model, tuple(pool))


def policies_from_value(value: object) -> tuple[RolePolicy, ...]:
    """The ``policies`` setting as given: a table of tables by name (config files, ``config.json``), a
    sequence of :class:`RolePolicy`, or None (no policies: one policy on every seat)."""
    if value is None:
        return ()
    if isinstance(value, Mapping):
        return tuple(policy_from_table(str(name), table) for name, table in value.items())
    if isinstance(value, Sequence) and all(isinstance(p, RolePolicy) for p in value):
        return tuple(value)
    raise UsageError(f"policies must be a table of [policies.<name>] tables, got {value!r}")


@dataclass(frozen=True)
class RolesSection:
    """The run's policies, one per role (empty: one policy plays every seat)."""

    policies: tuple[RolePolicy, ...] = field(default_factory=tuple)
    """Each policy's name, seats, whether it trains and its learning rate (``[policies.<name>]``)."""

    def checks(self) -> list[tuple[bool, str]]:
        if not self.policies:
            return []
        names = [p.name for p in self.policies]
        seats = [s for p in self.policies for s in p.seats]
        checks = [c for p in self.policies for c in p.checks()]
        return [
            *checks,
            (len(set(names)) == len(names), f"policy names repeat: {names}"),
            (
                len(set(seats)) == len(seats),
                f"a seat is claimed by two policies ({self.seat_owners()}): give each seat one policy",
            ),
            (
                any(p.trainable for p in self.policies),
                "every policy is frozen (trainable = false): make at least one trainable",
            ),
        ]

    def seat_owners(self) -> dict[int, str]:
        """Each seat's policy, by seat (the last one listed wins where two claim a seat)."""
        return {seat: p.name for p in self.policies for seat in p.seats}

    def to_plain(self) -> dict[str, dict[str, Any]]:
        return {p.name: p.to_plain() for p in self.policies}
