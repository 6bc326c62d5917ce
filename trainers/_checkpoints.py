"""``checkpoints.jsonl``: one line per resumable checkpoint, written only once the checkpoint exists.

A record's ``step`` is the number of steps completed, i.e. the step a resumed run starts at.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class CheckpointRecord:
    """Where one checkpoint lives."""

    step: int
    """Steps completed when it was saved; a resumed run starts at this step."""
    state_path: str
    """Weights + optimizer (``create_training_client_from_state_with_optimizer``)."""
    sampler_path: str
    """Sampling weights (``create_sampling_client(model_path=...)``, ``envsuite play --policy``)."""


class CheckpointLog:
    """Appends records to ``path`` and finds the last one."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: CheckpointRecord) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(record), sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def records(self) -> list[CheckpointRecord]:
        """Every complete record (a torn last line from a kill mid-write is skipped)."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                data = json.loads(line)
                out.append(
                    CheckpointRecord(int(data["step"]), str(data["state_path"]), str(data["sampler_path"]))
                )
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
        return out

    def last(self) -> CheckpointRecord | None:
        records = self.records()
        return max(records, key=lambda r: r.step) if records else None
