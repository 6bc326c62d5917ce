"""``envsuite serve`` resolves client-named checkpoints and model directories only inside its own
directories (the state dir and ``--allow-dir``), and answers every other path with the same 404,
whether or not it exists (issue 32, item 3). Real server on 127.0.0.1, the real tinker SDK, raw HTTP.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
import tinker

from envsuite.backends.local import LocalServiceClient
from envsuite.models import resolve_model
from envsuite.serve import ServeConfig
from tests.conftest import TEST_MODEL
from tests.test_serve import running, sdk

_MISSING = "/no/such/dir/weights/x"


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete checkpoint written by another run, outside any server's state dir."""
    root = tmp_path_factory.mktemp("other-run")
    training = (
        LocalServiceClient(log_dir=root).create_lora_training_client(TEST_MODEL, rank=2, seed=0).result()
    )
    path = Path(training.save_state("elsewhere").result().path)
    training.close()
    assert (path / "envsuite_checkpoint.json").is_file()
    return path


def _answers(api: str, session_id: str, model_id: str, path: str) -> dict[str, tuple[int, str]]:
    """Every route that takes a checkpoint path, asked about ``path``: (status, error text) each."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {
        "create_from_state": (
            "load_weights",
            {"session_id": session_id, "model_seq_id": 90, "path": path, "optimizer": False},
        ),
        "load_weights": (
            "load_weights",
            {"model_id": model_id, "seq_id": 5, "path": path, "optimizer": True},
        ),
        "weights_info": ("weights_info", {"tinker_path": path}),
        "copy_weights": ("copy_weights", {"source_path": path}),
        "sampling_session": (
            "create_sampling_session",
            {"session_id": session_id, "sampling_session_seq_id": 91, "model_path": path},
        ),
        "asample": (
            "asample",
            {
                "model_path": path,
                "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]},
                "sampling_params": {"max_tokens": 2},
                "num_samples": 1,
            },
        ),
        "create_model": (
            "create_model",
            {"session_id": session_id, "model_seq_id": 92, "base_model": path},
        ),
    }
    out = {}
    for name, (route, body) in calls.items():
        response = httpx.post(f"{api}/{route}", json=body, timeout=60)
        out[name] = (response.status_code, response.json().get("error", "").replace(repr(path), "PATH"))
    return out


def test_paths_outside_the_state_dir_are_not_found_whether_or_not_they_exist(
    tmp_path: Path, outside: Path
) -> None:
    state = tmp_path / "state"
    (state / "runs").mkdir(parents=True)
    (state / "runs" / "link").symlink_to(outside.parent.parent)  # a link inside must not lead out
    model_dir = str(tmp_path / "a-model")  # a real model directory, outside the state dir
    shutil.copytree(resolve_model(TEST_MODEL).path, model_dir)
    with running(ServeConfig(state_dir=state)) as url, sdk(url) as service:
        training = service.create_lora_training_client(TEST_MODEL, rank=2, seed=0).result()
        inside = training.save_state("mine").result().path
        with pytest.raises(tinker.NotFoundError, match="no checkpoint"):
            service.create_training_client_from_state(str(outside)).result(timeout=60)
        api = f"{url}/api/v1"
        session_id = training.model_id.split(":")[0]
        probes = [str(outside), "/etc", _MISSING, str(state / "runs/link/weights/elsewhere"), model_dir]
        answers = {probe: _answers(api, session_id, training.model_id, probe) for probe in probes}
        first = answers[probes[0]]
        assert all(status == 404 for status, _ in first.values()), first
        for probe in probes[1:]:
            assert answers[probe] == first, f"{probe} answered differently from a missing path"
        # Inside the state dir everything still works, by tinker:// path and by directory.
        assert service.create_training_client_from_state(inside).result(timeout=60).model_id
        info = httpx.post(f"{api}/weights_info", json={"tinker_path": inside}, timeout=60)
        assert info.status_code == 200 and info.json()["base_model"] == TEST_MODEL
        directory = str(state / "runs" / inside.removeprefix("tinker://"))
        assert service.create_training_client_from_state(directory).result(timeout=60).model_id


def test_allow_dir_lets_the_operator_name_more_directories(tmp_path: Path, outside: Path) -> None:
    other_root = outside.parent.parent.parent
    config = ServeConfig(state_dir=tmp_path / "state", allowed_dirs=(other_root,))
    with running(config) as url, sdk(url) as service:
        loaded = service.create_training_client_from_state(str(outside)).result(timeout=60)
        assert loaded.get_info().model_data.model_name == TEST_MODEL
        session_id = loaded.model_id.split(":")[0]
        api = f"{url}/api/v1"

        def sampling_session(path: str, seq: int) -> httpx.Response:
            body = {"session_id": session_id, "sampling_session_seq_id": seq, "model_path": path}
            return httpx.post(f"{api}/create_sampling_session", json=body, timeout=60)

        assert sampling_session(str(outside), 50).status_code == 200
        beside = sampling_session(os.path.dirname(other_root), 51)  # holds the allowed dir: not inside it
        assert beside.status_code == 404 and "no checkpoint" in beside.json()["error"]
