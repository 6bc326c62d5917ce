"""The local clients against the installed ``tinker`` SDK: every public method, sync and async, every keyword.

The first tests introspect the SDK's public client classes, so an SDK upgrade that adds a method or a
keyword the local clients lack fails here (the checker itself is tested on an SDK class given one
extra method). The rest exercise what the surface promises: the async twins, the back-compat futures,
custom losses, runs and checkpoints through the REST client, ``tinker://`` paths, sampler handles,
``install()``, and the clear ``NotImplementedError`` of what cannot work locally.
"""

from __future__ import annotations

import asyncio
import inspect
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tinker
import torch
from tinker import types
from tinker.lib.public_interfaces.rest_client import RestClient

from envsuite.backends import local
from envsuite.backends.local import (
    LocalRestClient,
    LocalSamplingClient,
    LocalServiceClient,
    LocalTrainingClient,
    LocalTrainingClientFuture,
)
from tests.conftest import TEST_MODEL

PAIRS: list[tuple[type, type]] = [
    (tinker.ServiceClient, LocalServiceClient),
    (tinker.TrainingClient, LocalTrainingClient),
    (tinker.SamplingClient, LocalSamplingClient),
    (RestClient, LocalRestClient),
]
TOKENS = [1, 28, 4003, 17, 902, 311, 64, 2]
ADAM = types.AdamParams(learning_rate=1e-2)


def _is_async(member: Any) -> bool:
    return inspect.iscoroutinefunction(inspect.unwrap(member))


def _parameter_gaps(name: str, sdk: Any, ours: Any) -> list[str]:
    gaps: list[str] = []
    theirs = [p for p in inspect.signature(sdk).parameters.values() if p.name != "self"]
    mine = {p.name: p for p in inspect.signature(ours).parameters.values() if p.name != "self"}
    positional = [p.name for p in mine.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    for index, param in enumerate(theirs):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        got = mine.get(param.name)
        if got is None:
            gaps.append(f"{name}: keyword {param.name!r} missing")
        elif param.kind is param.POSITIONAL_OR_KEYWORD and positional[index : index + 1] != [param.name]:
            gaps.append(f"{name}: {param.name!r} is not positional argument {index}")
        elif param.default is not param.empty and got.default is got.empty:
            gaps.append(f"{name}: {param.name!r} has no default")
    extra = [p for p in mine.values() if p.name not in {t.name for t in theirs} and p.default is p.empty]
    gaps += [f"{name}: extra required argument {p.name!r}" for p in extra if p.kind not in (p.VAR_KEYWORD,)]
    return gaps


def surface_gaps(sdk_cls: type, local_cls: type) -> list[str]:
    """Every public SDK member the local class lacks or gets wrong (kind, async-ness, arguments)."""
    gaps: list[str] = []
    for name in sorted(n for n in dir(sdk_cls) if not n.startswith("_")):
        sdk_member = inspect.getattr_static(sdk_cls, name)
        try:
            ours = inspect.getattr_static(local_cls, name)
        except AttributeError:
            gaps.append(f"{sdk_cls.__name__}.{name} is missing")
            continue
        label = f"{sdk_cls.__name__}.{name}"
        if isinstance(sdk_member, property):
            if not isinstance(ours, property):
                gaps.append(f"{label} must be a property")
            continue
        if isinstance(sdk_member, staticmethod | classmethod) and type(ours) is not type(sdk_member):
            gaps.append(f"{label} must be a {type(sdk_member).__name__}")
            continue
        sdk_fn, our_fn = getattr(sdk_cls, name), getattr(local_cls, name)
        if not callable(sdk_fn):
            continue
        if _is_async(sdk_fn) != _is_async(our_fn):
            gaps.append(f"{label} must {'' if _is_async(sdk_fn) else 'not '}be async")
        gaps += _parameter_gaps(label, sdk_fn, our_fn)
    return gaps


@pytest.mark.parametrize(("sdk_cls", "local_cls"), PAIRS, ids=lambda c: c.__name__)
def test_local_clients_have_every_public_sdk_method_and_keyword(sdk_cls: type, local_cls: type) -> None:
    assert surface_gaps(sdk_cls, local_cls) == []


def test_the_surface_check_fails_when_the_sdk_grows() -> None:
    class NewerTrainingClient(tinker.TrainingClient):
        def fancy_new_call(self, data: list[Any]) -> None: ...

        async def fancy_new_call_async(self, data: list[Any]) -> None: ...

        def forward(self, data: Any, loss_fn: Any, loss_fn_config: Any = None, *, chunk: int = 0) -> Any: ...

    gaps = surface_gaps(NewerTrainingClient, LocalTrainingClient)
    assert "NewerTrainingClient.fancy_new_call is missing" in gaps
    assert "NewerTrainingClient.fancy_new_call_async is missing" in gaps
    assert "NewerTrainingClient.forward: keyword 'chunk' missing" in gaps


# -- behaviour --------------------------------------------------------------------------------------


@pytest.fixture
def service(tmp_path: Path) -> LocalServiceClient:
    return LocalServiceClient(log_dir=tmp_path / "runs")


def _datum(tokens: list[int] = TOKENS, **inputs: Any) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": np.array(tokens[1:]), **inputs},
    )


async def test_async_twins_return_what_the_sdk_returns(service: LocalServiceClient) -> None:
    training = await service.create_lora_training_client_async(
        TEST_MODEL, rank=4, seed=0, user_metadata={"k": "v"}
    )
    assert isinstance(training, LocalTrainingClient)
    fwd = await training.forward_backward_async([_datum()], "cross_entropy")
    opt = await training.optim_step_async(ADAM)
    assert isinstance((await fwd.result_async()), types.ForwardBackwardOutput)
    assert (await opt).metrics["step:max"] == 1.0
    assert (await training.get_info_async()).lora_rank == 4
    state = await (await training.save_state_async("s1", ttl_seconds=3600))
    sampler = await training.save_weights_and_get_sampling_client_async()
    response = await sampler.sample_async(
        types.ModelInput.from_ints(TOKENS), 2, types.SamplingParams(max_tokens=3, seed=1)
    )
    assert isinstance(response, types.SampleResponse) and len(response.sequences) == 2
    assert len(await sampler.compute_logprobs_async(types.ModelInput.from_ints(TOKENS))) == len(TOKENS)
    assert await sampler.get_base_model_async() == TEST_MODEL
    resumed = await service.create_training_client_from_state_with_optimizer_async(state.path)
    assert resumed.step == 1 and resumed.model_id != training.model_id


def test_creation_futures_forward_client_calls_with_the_sdk_warning(service: LocalServiceClient) -> None:
    future = service.create_lora_training_client(TEST_MODEL, rank=2, seed=0)
    assert isinstance(future, LocalTrainingClientFuture)
    with pytest.warns(FutureWarning, match="deprecated"):
        out = future.forward_backward([_datum()], "cross_entropy").result()
    assert out.metrics["loss:sum"] > 0
    with pytest.warns(FutureWarning):
        sampler_future = future.save_weights_and_get_sampling_client()
    with pytest.warns(FutureWarning):
        assert sampler_future.get_base_model() == TEST_MODEL
    assert isinstance(future.result(), LocalTrainingClient)


def test_custom_loss_callable_and_handle_match_cross_entropy(service: LocalServiceClient) -> None:
    weights = np.linspace(0.5, 1.5, len(TOKENS) - 1).astype(np.float32)

    def weighted_nll(data: list[types.Datum], logprobs_list: list[torch.Tensor]) -> tuple[torch.Tensor, dict]:
        loss = sum(-(torch.tensor(weights) * lp).sum() for lp in logprobs_list)
        return loss, {"custom/seen:sum": float(len(logprobs_list))}

    def per_datum(logprobs: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, dict]:
        loss = -(logprobs * weights).sum()
        return loss, {"custom/nll:sum": loss}

    handle = service.create_custom_loss(per_datum, input_ranks={"logprobs": 1, "weights": 1}).result()
    runs = {}
    for kind in ("builtin", "callable", "handle"):
        client = service.create_lora_training_client(TEST_MODEL, rank=2, seed=3).result()
        if kind == "builtin":
            out = client.forward_backward([_datum(weights=weights)], "cross_entropy").result()
        elif kind == "callable":
            out = client.forward_backward_custom([_datum()], weighted_nll).result()
            assert out.metrics["custom/seen:sum"] == 1.0
        else:
            out = client.forward_backward_custom([_datum(weights=weights)], handle).result()
            assert out.metrics["custom/nll:sum"] == pytest.approx(out.metrics["loss:sum"])
        client.optim_step(ADAM).result()
        after = client.forward([_datum()], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
        runs[kind] = (out.metrics["loss:sum"], after)
    for kind in ("callable", "handle"):
        assert runs[kind][0] == pytest.approx(runs["builtin"][0], rel=1e-5)
        np.testing.assert_allclose(runs[kind][1], runs["builtin"][1], atol=1e-5)


def test_rest_client_lists_runs_and_checkpoints_by_path_or_tinker_path(service: LocalServiceClient) -> None:
    training = service.create_lora_training_client(
        TEST_MODEL, rank=2, seed=0, user_metadata={"renderer": "x"}
    ).result()
    training.forward_backward([_datum()], "cross_entropy")
    training.optim_step(ADAM)
    state = Path(training.save_state("first", ttl_seconds=60).result().path)
    training.save_weights_for_sampler("first-sampler").result()
    rest = service.create_rest_client()
    run = rest.get_training_run_by_tinker_path(str(state)).result()
    assert run.training_run_id == training.model_id and run.user_metadata == {"renderer": "x"}
    assert run.is_lora and run.lora_rank == 2 and run.last_checkpoint is not None
    tinker_path = f"tinker://{training.model_id}/weights/first"
    assert rest.get_training_run_by_tinker_path(tinker_path).result().training_run_id == training.model_id
    listed = rest.list_checkpoints(training.model_id).result().checkpoints
    assert sorted(c.checkpoint_id for c in listed) == ["sampler_weights/first-sampler", "weights/first"]
    assert next(c for c in listed if c.checkpoint_type == "training").expires_at is not None
    assert rest.list_training_runs().result().cursor.total_count == 1
    info = rest.get_weights_info_by_tinker_path(tinker_path).result()
    assert info.base_model == TEST_MODEL and info.lora_rank == 2
    # tinker:// paths load wherever paths do
    sampler = service.create_sampling_client(model_path=tinker_path).result()
    assert sampler.get_base_model() == TEST_MODEL
    copy = service.copy_weights(tinker_path).result()
    assert copy.startswith("tinker://") and copy != tinker_path
    assert rest.get_weights_info_by_tinker_path(copy).result().lora_rank == 2
    rest.delete_checkpoint(training.model_id, "sampler_weights/first-sampler").result()
    assert [c.checkpoint_id for c in rest.list_checkpoints(training.model_id).result().checkpoints] == [
        "weights/first"
    ]
    with pytest.raises(LookupError):
        rest.get_training_run("no-such-run").result()
    with pytest.raises(ValueError, match="Invalid tinker path"):
        rest.get_training_run_by_tinker_path("tinker://a/b").result()


def test_sampler_handles_and_pickling(service: LocalServiceClient) -> None:
    training = service.create_lora_training_client(TEST_MODEL, rank=2, seed=0).result()
    snapshot = training.save_weights_and_get_sampling_client().result()
    assert LocalSamplingClient.from_sampler_handle(snapshot.get_sampler_handle()) is snapshot
    saved = training.save_weights_and_get_sampling_client("named").result()
    prompt = types.ModelInput.from_ints(TOKENS)
    clone = pickle.loads(pickle.dumps(saved))
    assert clone is not saved and clone.model_path == saved.model_path
    np.testing.assert_allclose(
        clone.compute_logprobs(prompt).result()[1:], saved.compute_logprobs(prompt).result()[1:], atol=1e-6
    )
    with pytest.raises(ValueError, match="not a local sampler handle"):
        LocalSamplingClient.from_sampler_handle("nonsense")


def test_what_cannot_work_locally_names_the_method(service: LocalServiceClient) -> None:
    training = service.create_lora_training_client(TEST_MODEL, rank=2, seed=0).result()
    cases = [
        lambda: training.save_weights_external("x"),
        lambda: training.save_weights_and_get_sampling_client(kind="inflight"),
        lambda: training.optim_step(types.DimuonParams(learning_rate=0.1)),
        lambda: service.create_rest_client().whoami(),
        lambda: service.holder,
    ]
    for case in cases:
        with pytest.raises(NotImplementedError, match=r"not available on the local backend: .+"):
            case()


def test_install_turns_tinker_service_client_into_the_local_one(tmp_path: Path) -> None:
    sdk_service = tinker.ServiceClient
    with local.installed(tmp_path / "installed"):
        service = tinker.ServiceClient(base_url="http://unused", user_metadata={"who": "script"})
        assert isinstance(service, LocalServiceClient) and service.log_dir == tmp_path / "installed"
        training = service.create_lora_training_client(TEST_MODEL, rank=2, seed=0).result()
        assert tinker.RestClient().get_training_run(training.model_id).result().user_metadata == {
            "who": "script"
        }
    assert tinker.ServiceClient is sdk_service and not local.is_installed()


def test_closing_the_service_stops_its_clients(service: LocalServiceClient) -> None:
    training = service.create_lora_training_client(TEST_MODEL, rank=2, seed=0).result()
    with service:
        pass
    with pytest.raises(RuntimeError, match="closed"):
        training.forward([_datum()], "cross_entropy")
    with pytest.raises(RuntimeError, match="closed"):
        service.create_sampling_client(base_model=TEST_MODEL).result()


def test_async_twins_can_be_awaited_concurrently(service: LocalServiceClient) -> None:
    sampler = service.create_sampling_client(base_model=TEST_MODEL).result()

    async def many() -> list[types.SampleResponse]:
        params = types.SamplingParams(max_tokens=2, seed=0)
        prompt = types.ModelInput.from_ints(TOKENS)
        return await asyncio.gather(*(sampler.sample_async(prompt, 1, params) for _ in range(4)))

    assert len(asyncio.run(many())) == 4
