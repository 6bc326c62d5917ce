"""Local checkpoints: exact resume, small LoRA sampler files, and refusal of incomplete or corrupt dirs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from tinker import types

from envsuite.backends.local import (
    CheckpointError,
    LocalServiceClient,
    LocalTrainingClient,
    load_sampling_model,
)
from envsuite.models import resolve_model
from tests.conftest import TEST_MODEL

TOKENS_A = [1, 28, 4003, 17, 902, 311, 64, 2]
TOKENS_B = [1, 5, 99, 1200, 7, 2]
ADAM = types.AdamParams(learning_rate=5e-3, weight_decay=0.01, grad_clip_norm=1.0)


def _datum(tokens: list[int]) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": np.array(tokens[1:]),
            "weights": np.ones(len(tokens) - 1, np.float32),
        },
    )


def _train(client: LocalTrainingClient, steps: range) -> None:
    for step in steps:
        client.forward_backward([_datum(TOKENS_A if step % 2 else TOKENS_B)], "cross_entropy")
        client.optim_step(ADAM)


def _logprobs(client: LocalTrainingClient) -> np.ndarray:
    return (
        client.forward([_datum(TOKENS_A)], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    )


def _new_client(service: LocalServiceClient, full: bool) -> LocalTrainingClient:
    if full:
        return service.create_training_client(TEST_MODEL, full_finetune=True).result()
    return service.create_lora_training_client(TEST_MODEL, rank=4, seed=7).result()


@pytest.fixture
def service(tmp_path: Path) -> LocalServiceClient:
    return LocalServiceClient(log_dir=tmp_path)


@pytest.mark.parametrize("full", [False, True])
def test_resume_from_state_is_exact(service: LocalServiceClient, full: bool) -> None:
    straight = _new_client(service, full)
    _train(straight, range(5))
    expected = _logprobs(straight)

    first = _new_client(service, full)
    _train(first, range(2))
    path = first.save_state("half").result().path
    resumed = service.create_training_client_from_state_with_optimizer(path).result()
    assert resumed.step == 2
    _train(resumed, range(2, 5))
    np.testing.assert_allclose(_logprobs(resumed), expected, atol=1e-6, rtol=0)
    assert resumed.step == straight.step == 5


def test_weights_only_resume_restarts_the_optimizer(service: LocalServiceClient) -> None:
    client = _new_client(service, full=False)
    _train(client, range(2))
    path = client.save_state("w").result().path
    loaded = service.create_training_client_from_state(path).result()
    assert loaded.step == 0
    np.testing.assert_array_equal(_logprobs(loaded), _logprobs(client))


def test_lora_sampler_checkpoint_is_adapter_only_and_merges(service: LocalServiceClient) -> None:
    client = _new_client(service, full=False)
    _train(client, range(2))
    path = Path(client.save_weights_for_sampler("s").result().path)
    assert sorted(p.name for p in path.iterdir()) == ["adapter.safetensors", "envsuite_checkpoint.json"]
    meta = json.loads((path / "envsuite_checkpoint.json").read_text())
    assert meta["kind"] == "sampler" and meta["base_model"] == TEST_MODEL and meta["lora"]["rank"] == 4
    loaded = load_sampling_model(model_path=str(path))
    assert not loaded.model.training and loaded.model_path == str(path)
    with torch.no_grad():
        logits = loaded.model(torch.tensor([TOKENS_A[:-1]])).logits[0]
    merged = torch.log_softmax(logits, -1)[torch.arange(len(TOKENS_A) - 1), torch.tensor(TOKENS_A[1:])]
    np.testing.assert_allclose(merged.numpy(), _logprobs(client), atol=1e-4)
    # The shared input embedding is untouched by the unembedding adapter.
    base = load_sampling_model(base_model=TEST_MODEL).model
    assert torch.equal(base.get_input_embeddings().weight, loaded.model.get_input_embeddings().weight)


def test_full_sampler_checkpoint_is_an_hf_model_dir(service: LocalServiceClient) -> None:
    client = _new_client(service, full=True)
    _train(client, range(1))
    path = client.save_weights_for_sampler("full").result().path
    assert resolve_model(path).path == Path(path).resolve()
    sampler = service.create_sampling_client(model_path=path).result()
    logprobs = sampler.compute_logprobs(types.ModelInput.from_ints(TOKENS_A)).result()
    np.testing.assert_allclose(logprobs[1:], _logprobs(client), atol=1e-4)


@pytest.fixture
def saved_state(service: LocalServiceClient) -> Path:
    client = _new_client(service, full=False)
    _train(client, range(1))
    return Path(client.save_state("ok").result().path)


def test_missing_files_are_named(service: LocalServiceClient, saved_state: Path) -> None:
    (saved_state / "optimizer.pt").unlink()
    with pytest.raises(CheckpointError, match=r"incomplete: missing optimizer\.pt"):
        service.create_training_client_from_state_with_optimizer(str(saved_state)).result()
    (saved_state / "envsuite_checkpoint.json").unlink()
    with pytest.raises(CheckpointError, match=r"envsuite_checkpoint\.json is missing"):
        service.create_sampling_client(model_path=str(saved_state)).result()
    with pytest.raises(CheckpointError, match="does not exist"):
        service.create_sampling_client(model_path=str(saved_state / "nope")).result()


def test_corrupt_files_are_refused(service: LocalServiceClient, saved_state: Path) -> None:
    adapter = saved_state / "adapter.safetensors"
    good = load_file(str(adapter))
    adapter.write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match=r"adapter\.safetensors is corrupt"):
        service.create_training_client_from_state(str(saved_state)).result()
    save_file({name: torch.full_like(t, float("nan")) for name, t in good.items()}, str(adapter))
    with pytest.raises(CheckpointError, match="NaN or inf"):
        service.create_sampling_client(model_path=str(saved_state)).result()
    (saved_state / "envsuite_checkpoint.json").write_text("{ truncated")
    with pytest.raises(CheckpointError, match=r"corrupt envsuite_checkpoint\.json"):
        service.create_training_client_from_state(str(saved_state)).result()


def test_wrong_kind_and_names(service: LocalServiceClient) -> None:
    client = _new_client(service, full=False)
    sampler = client.save_weights_for_sampler("s").result().path
    with pytest.raises(CheckpointError, match="is a sampler checkpoint"):
        service.create_training_client_from_state(sampler).result()
    with pytest.raises(CheckpointError, match="already exists"):
        client.save_weights_for_sampler("s")
    assert client.save_weights_for_sampler("s", overwrite=True).result().path == sampler
    with pytest.raises(ValueError, match="no slashes"):
        client.save_state("../escape")


def test_models_load_correctly_from_many_threads_at_once() -> None:
    """transformers' loading uses process-global init contexts; concurrent loads must not corrupt weights."""
    from concurrent.futures import ThreadPoolExecutor

    from envsuite.engine.weights import load_base_model

    path = str(resolve_model(TEST_MODEL).path)
    reference = {k: v.clone() for k, v in load_base_model(path).state_dict().items()}
    with ThreadPoolExecutor(8) as pool:
        models = list(pool.map(lambda _: load_base_model(path), range(8)))
    for model in models:
        for name, value in model.state_dict().items():
            assert value.device.type == "cpu" and torch.equal(value, reference[name]), name
