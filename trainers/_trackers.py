"""Experiment trackers: every step's metrics row also goes to Weights & Biases and/or Trackio.

``metrics.jsonl`` stays the run's record (resume reads it); trackers are extra destinations, chosen by
config fields (``wandb_project``, ``trackio_project``), with the same metric names as the rows. Only
numbers go out (a row's string fields, such as the stop cause, stay in the file), and non-finite values
are left out of a tracker's row (a NaN would read as a broken chart, not as "no value").

Both libraries run offline: W&B with ``WANDB_MODE=offline`` (``wandb sync`` uploads later), Trackio
always (a SQLite file per project, ``trackio show`` to look). A resumed run continues the same tracker
run: W&B's run id is kept in ``log_dir/wandb_run_id``, Trackio's run is named after the log dir. The run
config sent is :meth:`TrainConfig.to_dict` (it holds no keys).
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from envsuite.trainers._config import ConfigError, TrainConfig

if TYPE_CHECKING:
    from wandb.sdk.wandb_run import Run

    from envsuite.trainers._metrics import Row

WANDB_RUN_ID_FILE = "wandb_run_id"


class Tracker(Protocol):
    """One destination of the per-step rows."""

    def log(self, values: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


def check_trackers(config: TrainConfig) -> None:
    """Raise ConfigError when a tracker the config asks for is not installed (before any work)."""
    wanted = {"wandb": config.tracking.wandb_project, "trackio": config.tracking.trackio_project}
    for package, project in wanted.items():
        if project and importlib.util.find_spec(package) is None:
            raise ConfigError(
                f"logging to {package} (project {project!r}) needs the {package} package: "
                f"pip install {package} (or pip install 'envsuite[tracking]')"
            )


def _run_name(config: TrainConfig, log_dir: Path) -> str:
    return config.tracking.wandb_name or log_dir.resolve().name


@dataclass
class _WandbTracker:
    run: Run

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def close(self) -> None:
        self.run.finish()


def _open_wandb(config: TrainConfig, log_dir: Path) -> Tracker:
    import secrets

    import wandb

    id_file = log_dir / WANDB_RUN_ID_FILE
    # W&B run ids are short lowercase alphanumerics; a resumed run reads its id back.
    run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(4)
    id_file.write_text(run_id + "\n")
    run = wandb.init(
        project=config.tracking.wandb_project,
        name=_run_name(config, log_dir),
        id=run_id,
        resume="allow",
        config=config.to_dict(),
        dir=str(log_dir),
    )
    return _WandbTracker(run)


class _TrackioTracker:
    """Trackio's API is module-level: one current run per process (``init``, ``log``, ``finish``)."""

    def log(self, values: dict[str, float], step: int) -> None:
        import trackio

        trackio.log(values, step=step)

    def close(self) -> None:
        import trackio

        trackio.finish()


def _open_trackio(config: TrainConfig, log_dir: Path, project: str) -> Tracker:
    import trackio

    trackio.init(
        project=project,
        name=_run_name(config, log_dir),
        config=config.to_dict(),
        resume="allow",
    )
    return _TrackioTracker()


@dataclass
class Trackers:
    """The trackers a run logs to (none by default); :meth:`log` takes a metrics row."""

    open: list[Tracker] = field(default_factory=list)

    def log(self, row: Row) -> None:
        if not self.open:
            return
        step = int(row["step"])
        values = {
            k: float(v)
            for k, v in row.items()
            if k != "step" and isinstance(v, int | float) and math.isfinite(float(v))
        }
        for tracker in self.open:
            tracker.log(values, step)

    def close(self) -> None:
        while self.open:
            self.open.pop().close()


def open_trackers(config: TrainConfig, log_dir: Path) -> Trackers:
    """Start the trackers ``config`` names (see the module docstring)."""
    check_trackers(config)
    trackers = Trackers()
    if config.tracking.wandb_project:
        trackers.open.append(_open_wandb(config, log_dir))
    if config.tracking.trackio_project:
        trackers.open.append(_open_trackio(config, log_dir, config.tracking.trackio_project))
    return trackers
