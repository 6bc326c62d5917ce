"""Experiment trackers: W&B (offline mode) and Trackio (local SQLite) get every step's metrics row.

Both are real libraries run offline; what they stored is read back from their own files (W&B's run
file is a LevelDB-format record log of its protobuf records, read by ``_wandb_history``). Runs go through
the ``envsuite train`` command in a fresh process, as a user starts them: Trackio reads ``TRACKIO_DIR``
when it is first imported, so only a process started with it set writes there (not the home dir).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envsuite.trainers import ConfigError, TrainConfig, read_metrics, run_training
from tests.test_trainer_run import TOY_ID, register_toy

CANARY = "tml-canary-secret-5b1e"
ENVSUITE = str(Path(sys.executable).parent / "envsuite")


def _train(tmp_path: Path, steps: int) -> None:
    """``envsuite train`` with both trackers, offline, in a process of its own."""
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "TRACKIO_DIR": str(tmp_path / "trackio"),
        "TINKER_API_KEY": CANARY,
        "HF_HUB_OFFLINE": "1",
    }
    flags = [
        "--model", "tiny-random", "--steps", str(steps), "--batch-size", "2", "--group-size", "2",
        "--max-tokens", "1", "--lr", "1e-2", "--lora-rank", "4", "--save-every", "1", "--eval-every", "1",
        "--test-groups", "2", "--wandb-project", "envsuite-tests", "--trackio-project", "envsuite-tests",
    ]  # fmt: skip
    done = subprocess.run(
        [ENVSUITE, "train", "arithmetic", "--log-dir", str(tmp_path / "run"), "--no-progress", *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _config(tmp_path: Path) -> TrainConfig:
    register_toy()
    return TrainConfig.from_dict(
        {
            "env_id": TOY_ID,
            "log_dir": str(tmp_path / "run"),
            "model": "tiny-random",
            "n_steps": 1,
            "wandb_project": "envsuite-tests",
        }
    )


def _log_records(path: Path) -> Iterator[bytes]:
    """The records of a LevelDB-format log (W&B's ``.wandb`` file after its 7-byte header)."""
    data, block, position, pending = path.read_bytes(), 32768, 7, b""
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            yield pending


def _wandb_history(log_dir: Path) -> dict[int, dict[str, float]]:
    from wandb.proto import wandb_internal_pb2

    rows: dict[int, dict[str, float]] = {}
    for run_file in sorted(log_dir.glob("wandb/offline-run-*/run-*.wandb")):
        for raw in _log_records(run_file):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(raw)
            if record.WhichOneof("record_type") != "history":
                continue
            # W&B stores a key holding "/" as its parts (nested_key)
            values = {
                item.key or "/".join(item.nested_key): json.loads(item.value_json)
                for item in record.history.item
            }
            metrics = {k: v for k, v in values.items() if not k.startswith("_")}
            if metrics:
                rows[int(record.history.step.num)] = metrics
    return rows


def _trackio_history(trackio_dir: Path) -> dict[int, dict[str, float]]:
    with sqlite3.connect(trackio_dir / "envsuite-tests.db") as db:
        found = db.execute(
            "SELECT step, metrics FROM metrics WHERE run_name = 'run' ORDER BY step"
        ).fetchall()
    rows: dict[int, dict[str, float]] = {}
    for step, metrics in found:
        assert int(step) not in rows, f"step {step} logged twice"
        rows[int(step)] = json.loads(metrics)
    return rows


def _expected(log_dir: Path) -> dict[int, dict[str, Any]]:
    expected = {}
    for row in read_metrics(log_dir / "metrics.jsonl"):
        step = int(row.pop("step"))  # type: ignore[arg-type]
        expected[step] = {k: v for k, v in row.items() if isinstance(v, int | float) and v == v}
    return expected


def test_wandb_and_trackio_get_the_metrics_rows_and_a_resumed_run_continues(tmp_path: Path) -> None:
    log_dir = tmp_path / "run"
    _train(tmp_path, 2)
    run_id = (log_dir / "wandb_run_id").read_text()
    _train(tmp_path, 3)  # resumes at step 2
    assert (log_dir / "wandb_run_id").read_text() == run_id
    expected = _expected(log_dir)
    assert sorted(expected) == [0, 1, 2]
    for stored in (_wandb_history(log_dir), _trackio_history(tmp_path / "trackio")):
        assert sorted(stored) == [0, 1, 2]
        for step, row in expected.items():
            assert set(stored[step]) == set(row), step
            assert stored[step] == pytest.approx(row), step
    assert "reward/mean" in expected[0] and "test/reward/mean" in expected[0]
    # No secret from the environment reaches any file the run or the trackers wrote.
    written = [p for root in (log_dir, tmp_path / "trackio") for p in root.rglob("*") if p.is_file()]
    assert len(written) > 5
    assert [str(p) for p in written if CANARY.encode() in p.read_bytes()] == []


def test_a_missing_tracker_package_is_a_clear_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else find_spec(name, *a)
    )
    with pytest.raises(ConfigError, match=r"needs the wandb package: pip install wandb"):
        run_training(_config(tmp_path), show_progress=False)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_the_train_command_has_the_tracker_flags() -> None:
    from envsuite.cli import build_parser
    from envsuite.cli._train_cmd import config_from_args

    args = build_parser().parse_args(
        ["train", TOY_ID, "--wandb-project", "p", "--wandb-name", "n", "--trackio-project", "q"]
    )
    config = config_from_args(args)
    assert (config.wandb_project, config.wandb_name, config.trackio_project) == ("p", "n", "q")
