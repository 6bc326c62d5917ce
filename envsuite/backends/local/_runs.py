"""Training runs and checkpoints on disk: what the local ``RestClient`` lists, and ``tinker://`` paths.

A run is a directory ``<log_dir>/<run id>/`` holding ``run.json`` (base model, LoRA rank, the
``user_metadata`` given when the training client was made, creation time) and the run's checkpoints
under ``weights/<name>`` (``save_state``) and ``sampler_weights/<name>``, the hosted service's layout.
A checkpoint is addressed either by its directory path or by the SDK's ``tinker://<run id>/<kind
segment>/<name>``, which resolves against a log dir; both name the same directory.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tinker import types

from envsuite.engine import weights as ckpt
from envsuite.models import CHECKPOINT_META_FILE

RUN_FILE = "run.json"
TINKER_SCHEME = "tinker://"
SEGMENT_OF_KIND: dict[ckpt.CheckpointKind, str] = {
    ckpt.CheckpointKind.STATE: "weights",
    ckpt.CheckpointKind.SAMPLER: "sampler_weights",
}
_TYPE_OF_SEGMENT: dict[str, types.CheckpointType] = {"weights": "training", "sampler_weights": "sampler"}


class UnknownRunError(LookupError):
    """A training run id or checkpoint path that names nothing under the log dir."""


@dataclass(frozen=True)
class RunRecord:
    """What ``run.json`` holds about one training run."""

    run_id: str
    base_model: str
    lora_rank: int | None
    user_metadata: dict[str, str] = field(default_factory=dict)
    created: str = ""
    """ISO-8601 UTC creation time."""

    def write(self, root: Path) -> None:
        directory = root / self.run_id
        directory.mkdir(parents=True, exist_ok=True)
        data = {
            "training_run_id": self.run_id,
            "base_model": self.base_model,
            "lora_rank": self.lora_rank,
            "user_metadata": self.user_metadata,
            "created": self.created or _now().isoformat(),
        }
        tmp = directory / f".{RUN_FILE}.tmp"
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, directory / RUN_FILE)

    @staticmethod
    def read(run_dir: Path) -> RunRecord:
        try:
            data: dict[str, Any] = json.loads((run_dir / RUN_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise UnknownRunError(f"no readable training run at {str(run_dir)!r} ({exc})") from exc
        rank = data.get("lora_rank")
        return RunRecord(
            run_id=str(data["training_run_id"]),
            base_model=str(data["base_model"]),
            lora_rank=None if rank is None else int(rank),
            user_metadata={str(k): str(v) for k, v in dict(data.get("user_metadata") or {}).items()},
            created=str(data.get("created", "")),
        )


def resolve_checkpoint_path(path: str, log_dir: Path) -> Path:
    """The directory a checkpoint path names: a ``tinker://`` path under ``log_dir``, else the path itself."""
    if not path.startswith(TINKER_SCHEME):
        return Path(path).expanduser()
    parsed = types.ParsedCheckpointTinkerPath.from_tinker_path(path)
    run_id, segment, name = path[len(TINKER_SCHEME) :].split("/")
    if parsed.checkpoint_type == "external":
        raise ValueError(f"{path!r}: external weights are not stored by the local backend")
    for part in (run_id, name):
        if part in ("", ".", "..") or os.sep in part:
            raise ValueError(f"invalid tinker path {path!r}")
    return log_dir / run_id / segment / name


def tinker_path_of(directory: Path) -> str:
    """``tinker://<run id>/<segment>/<name>`` for a checkpoint directory in the standard layout."""
    return f"{TINKER_SCHEME}{directory.parent.parent.name}/{directory.parent.name}/{directory.name}"


def run_dir_of_checkpoint(directory: Path) -> Path:
    """The run directory a checkpoint directory belongs to (``<run>/<segment>/<name>``)."""
    if directory.parent.name not in _TYPE_OF_SEGMENT:
        raise UnknownRunError(f"{str(directory)!r} is not a checkpoint in a training run's layout")
    return directory.parent.parent


def checkpoint_of(directory: Path, *, tinker_paths: bool) -> types.Checkpoint:
    """The SDK's ``Checkpoint`` record for a checkpoint directory."""
    meta = ckpt.read_meta(directory)
    meta_time = datetime.fromtimestamp((directory / CHECKPOINT_META_FILE).stat().st_mtime, UTC)
    size = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
    return types.Checkpoint(
        checkpoint_id=f"{directory.parent.name}/{directory.name}",
        checkpoint_type=_TYPE_OF_SEGMENT[directory.parent.name],
        time=meta_time,
        tinker_path=tinker_path_of(directory) if tinker_paths else str(directory),
        size_bytes=size,
        user_metadata=dict(meta.user_metadata) or None,
        expires_at=meta.expires_at,
    )


def list_checkpoints(run_dir: Path, *, tinker_paths: bool) -> list[types.Checkpoint]:
    """Every complete checkpoint of a run, oldest first (incomplete or corrupt ones are left out)."""
    found: list[types.Checkpoint] = []
    for segment in _TYPE_OF_SEGMENT:
        base = run_dir / segment
        if not base.is_dir():
            continue
        for directory in base.iterdir():
            if directory.name.startswith(".") or not directory.is_dir():
                continue
            try:
                found.append(checkpoint_of(directory, tinker_paths=tinker_paths))
            except ckpt.CheckpointError:
                continue
    return sorted(found, key=lambda c: (c.time, c.checkpoint_id))


def training_run_of(run_dir: Path, *, tinker_paths: bool) -> types.TrainingRun:
    """The SDK's ``TrainingRun`` record for a run directory."""
    record = RunRecord.read(run_dir)
    checkpoints = list_checkpoints(run_dir, tinker_paths=tinker_paths)
    training = [c for c in checkpoints if c.checkpoint_type == "training"]
    sampler = [c for c in checkpoints if c.checkpoint_type == "sampler"]
    times = [c.time for c in checkpoints]
    created = datetime.fromisoformat(record.created) if record.created else _now()
    return types.TrainingRun(
        training_run_id=record.run_id,
        base_model=record.base_model,
        model_owner="local",
        is_lora=record.lora_rank is not None,
        lora_rank=record.lora_rank,
        last_request_time=max([created, *times]),
        last_checkpoint=training[-1] if training else None,
        last_sampler_checkpoint=sampler[-1] if sampler else None,
        user_metadata=dict(record.user_metadata) or None,
    )


def run_dirs(log_dir: Path) -> list[Path]:
    """Every run directory under ``log_dir``, newest first."""
    if not log_dir.is_dir():
        return []
    runs = [d for d in log_dir.iterdir() if (d / RUN_FILE).is_file()]
    return sorted(runs, key=lambda d: (d / RUN_FILE).stat().st_mtime, reverse=True)


def delete_checkpoint_dir(directory: Path) -> None:
    """Remove a checkpoint directory (its metadata first, so a crash never leaves it looking complete)."""
    ckpt.read_meta(directory)
    (directory / CHECKPOINT_META_FILE).unlink()
    shutil.rmtree(directory)


def _now() -> datetime:
    return datetime.now(UTC)
