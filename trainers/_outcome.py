"""How a run ended (:class:`StopCause`) and where its outputs are (:class:`TrainResult`): shared by the
one-policy loop (``trainers._loop``) and the policy-per-role loop (``trainers._role_loop``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from envsuite.trainers._checkpoints import CheckpointRecord


class StopCause(enum.StrEnum):
    """Why a run ended."""

    COMPLETED = "completed"
    """All ``n_steps`` steps ran."""
    INTERRUPTED = "interrupted"
    """Ctrl-C (SIGINT) or :meth:`Trainer.request_stop`: stopped after a step and saved."""
    NON_FINITE = "non_finite"
    """A loss or gradient came out NaN/inf; the last good checkpoint is kept, nothing newer saved."""
    SAMPLERS_LOST = "samplers_lost"
    """Every sampler replica died (processes killed, Ray nodes gone): stopped after the last trained
    step and saved; rerun (with live samplers) to resume."""


@dataclass(frozen=True)
class TrainResult:
    """How a run ended and where its outputs are."""

    cause: StopCause
    steps_completed: int
    """Steps whose metrics are logged (the next run starts here or at the last checkpoint)."""
    log_dir: Path
    last_checkpoint: CheckpointRecord | None
    message: str = ""
    plot_path: Path | None = None
    policy_checkpoints: dict[str, CheckpointRecord] = field(default_factory=dict)
    """A run with a policy per role: each policy's last checkpoint, by policy name (empty otherwise)."""
