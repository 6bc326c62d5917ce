"""Training endpoints (``tinker/resources/models.py``, ``training.py``, ``weights.py``).

Each call answers ``{"request_id", "model_id"}`` at once and runs on the model's local training client,
whose single worker thread keeps calls in the order they arrived (the SDK sends one model's requests
one at a time, in seq order). A request repeated with the same seq id gets the first one's request id.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path
from typing import Any

import zstandard
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from tinker import types

from envsuite.backends.local import LocalTrainingClient, tinker_path_of
from envsuite.serve._futures import then
from envsuite.serve._http import INLINE_PARSE_BYTES, Unsupported, error, parse, state_of
from envsuite.serve._state import ServerState
from envsuite.serve._vllm import adapter_name
from envsuite.serve.tinker_api._wire import decode_forward_backward

router = APIRouter(prefix="/api/v1")


def _accepted(request_id: str, model_id: str | None = None) -> dict[str, Any]:
    return types.UntypedAPIFuture(request_id=request_id, model_id=model_id).model_dump(exclude_none=True)


def _tinker_path(path: str) -> str:
    return path if path.startswith("tinker://") else tinker_path_of(Path(path))


def _metadata(raw: dict[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (raw or {}).items()}


# -- creating models ----------------------------------------------------------------------------


@router.post("/create_model")
async def create_model(request: Request) -> dict[str, Any]:
    body = await parse(request, types.CreateModelRequest)
    state = state_of(request)
    state.session(body.session_id)
    model_id = f"{body.session_id}:train:{body.model_seq_id}"

    base_model = state.scope.model(body.base_model)
    lora = body.lora_config
    if state.vllm is not None:
        lora = state.vllm.training_lora(lora, base_model)

    def build() -> types.CreateModelResponse:
        if lora is None:
            future = state.service.create_training_client(
                base_model, user_metadata=_metadata(body.user_metadata)
            )
        else:
            future = state.service.create_lora_training_client(
                base_model,
                rank=lora.rank,
                seed=lora.seed,
                train_mlp=lora.train_mlp,
                train_attn=lora.train_attn,
                train_unembed=lora.train_unembed,
                user_metadata=_metadata(body.user_metadata),
                optimizer=body.optimizer_config,
            )
        state.add_model(body.session_id, model_id, future.result())
        return types.CreateModelResponse(model_id=model_id)

    request_id = state.futures.start(lambda: state.loader.submit(build), key=("create_model", model_id))
    return _accepted(request_id, model_id)


@router.post("/load_weights")
async def load_weights(request: Request) -> dict[str, Any]:
    body = await parse(request, types.LoadWeightsRequest)
    state = state_of(request)
    if body.session_id is not None and body.model_seq_id is not None:
        return _create_from_checkpoint(state, body)
    if body.model_id is None:
        raise Unsupported("load_weights needs a model_id, or a session_id and model_seq_id")
    model = state.model(body.model_id)
    load = model.client.load_state_with_optimizer if body.optimizer else model.client.load_state
    path = state.scope.checkpoint(body.path)

    def begin() -> concurrent.futures.Future[types.LoadWeightsResponse]:
        loaded = load(path).future()
        return then(loaded, lambda _: types.LoadWeightsResponse(path=body.path, model_id=body.model_id))

    request_id = state.futures.start(begin, key=(body.model_id, body.seq_id))
    return _accepted(request_id, body.model_id)


def _create_from_checkpoint(state: ServerState, body: types.LoadWeightsRequest) -> dict[str, Any]:
    session_id, model_seq_id = body.session_id, body.model_seq_id
    assert session_id is not None and model_seq_id is not None
    state.session(session_id)
    model_id = f"{session_id}:train:{model_seq_id}"
    path = state.scope.checkpoint(body.path)
    # base_model is only compared with the checkpoint's own record (the weights load from that record).
    base_model = body.base_model

    def build() -> types.LoadWeightsResponse:
        if body.optimizer:
            future = state.service.create_training_client_from_state_with_optimizer(
                path, base_model, _metadata(body.user_metadata)
            )
        else:
            future = state.service.create_training_client_from_state(
                path, base_model, _metadata(body.user_metadata), optimizer=body.optimizer_config
            )
        state.add_model(session_id, model_id, future.result())
        return types.LoadWeightsResponse(path=body.path, model_id=model_id)

    request_id = state.futures.start(lambda: state.loader.submit(build), key=("create_model", model_id))
    return _accepted(request_id, model_id)


# -- compute ------------------------------------------------------------------------------------


def _decode(raw: bytes, zstd: bool, limit: int) -> tuple[types.ForwardBackwardRequest, bool]:
    if zstd:
        try:
            raw = zstandard.ZstdDecompressor().decompress(raw, max_output_size=limit)
        except zstandard.ZstdError as exc:
            raise Unsupported(f"the zstd body does not decompress: {exc}") from exc
    return decode_forward_backward(raw)


@router.post("/forward_backward")
async def forward_backward(request: Request) -> dict[str, Any]:
    raw = await request.body()
    state = state_of(request)
    zstd = request.headers.get("content-encoding", "").lower() == "zstd"
    if zstd or len(raw) > INLINE_PARSE_BYTES:  # megabytes of datums: decoded off the event loop
        body, forward_only = await asyncio.to_thread(_decode, raw, zstd, state.config.max_body_bytes)
    else:
        body, forward_only = _decode(raw, zstd, state.config.max_body_bytes)
    client = state.model(body.model_id).client
    data = list(body.forward_backward_input.data)
    loss_fn = body.forward_backward_input.loss_fn
    config = body.forward_backward_input.loss_fn_config
    run = client.forward if forward_only else client.forward_backward
    request_id = state.futures.start(
        lambda: run(data, loss_fn, config).future(),
        key=(body.model_id, body.seq_id, "fwd" if forward_only else "fwdbwd"),
    )
    return _accepted(request_id, body.model_id)


@router.post("/optim_step")
async def optim_step(request: Request) -> dict[str, Any]:
    body = await parse(request, types.OptimStepRequest)
    state = state_of(request)
    client = state.model(body.model_id).client
    request_id = state.futures.start(
        lambda: client.optim_step(body.optim_params).future(), key=(body.model_id, body.seq_id)
    )
    return _accepted(request_id, body.model_id)


# -- saving -------------------------------------------------------------------------------------


@router.post("/save_weights")
async def save_weights(request: Request) -> dict[str, Any]:
    body = await parse(request, types.SaveWeightsRequest)
    state = state_of(request)
    client = state.model(body.model_id).client
    name = body.path or f"seq-{body.seq_id}"

    def begin() -> concurrent.futures.Future[types.SaveWeightsResponse]:
        saved = client.save_state(name, body.ttl_seconds, body.overwrite, body.user_metadata).future()
        return then(saved, lambda r: types.SaveWeightsResponse(path=_tinker_path(r.path)))

    request_id = state.futures.start(begin, key=(body.model_id, body.seq_id))
    return _accepted(request_id, body.model_id)


@router.post("/save_weights_for_sampler")
async def save_weights_for_sampler(request: Request) -> dict[str, Any]:
    body = await parse(request, types.SaveWeightsForSamplerRequest)
    state = state_of(request)
    model = state.model(body.model_id)
    if body.path is not None:
        return _save_sampler_weights(state, body, model.client)
    if body.sampling_session_seq_id is None:
        raise Unsupported("save_weights_for_sampler needs a path (name) or a sampling_session_seq_id")
    sampler_id = f"{model.session_id}:sample:{body.sampling_session_seq_id}"
    if state.vllm is not None:
        return _snapshot_on_vllm(state, body, model.client, sampler_id)

    def begin() -> concurrent.futures.Future[types.SaveWeightsForSamplerResponseInternal]:
        snapshot = model.client.save_weights_and_get_sampling_client(kind=body.kind).future()

        def register(client: Any) -> types.SaveWeightsForSamplerResponseInternal:
            state.add_snapshot(body.model_id, sampler_id, client)
            return types.SaveWeightsForSamplerResponseInternal(sampling_session_id=sampler_id)

        return then(snapshot, register)

    request_id = state.futures.start(begin, key=(body.model_id, body.seq_id))
    return _accepted(request_id, body.model_id)


def _snapshot_on_vllm(
    state: ServerState, body: types.SaveWeightsForSamplerRequest, client: LocalTrainingClient, sampler_id: str
) -> dict[str, Any]:
    """A snapshot sampler whose LoRA version is published to vLLM before its id is handed out: the
    snapshot and a save of the same weights are queued together (the model's worker runs them before
    any later call), then the save is written as a peft adapter and loaded (off the event loop)."""
    vllm = state.vllm
    assert vllm is not None

    def begin() -> concurrent.futures.Future[types.SaveWeightsForSamplerResponseInternal]:
        snapshot = client.save_weights_and_get_sampling_client(kind=body.kind).future()
        saved = client.save_weights_for_sampler(f"vllm-{adapter_name(sampler_id)}", overwrite=True).future()

        def publish() -> types.SaveWeightsForSamplerResponseInternal:
            sampler = snapshot.result()
            try:
                name = vllm.publish(adapter_name(sampler_id), Path(saved.result().path), remove_source=True)
            except BaseException:
                sampler.close()
                raise
            state.add_snapshot(body.model_id, sampler_id, sampler, name)
            return types.SaveWeightsForSamplerResponseInternal(sampling_session_id=sampler_id)

        return state.loader.submit(publish)

    request_id = state.futures.start(begin, key=(body.model_id, body.seq_id))
    return _accepted(request_id, body.model_id)


def _save_sampler_weights(
    state: ServerState, body: types.SaveWeightsForSamplerRequest, client: LocalTrainingClient
) -> dict[str, Any]:
    assert body.path is not None
    name = body.path

    def begin() -> concurrent.futures.Future[types.SaveWeightsForSamplerResponseInternal]:
        saved = client.save_weights_for_sampler(name, body.ttl_seconds, body.user_metadata).future()
        return then(saved, lambda r: types.SaveWeightsForSamplerResponseInternal(path=_tinker_path(r.path)))

    request_id = state.futures.start(begin, key=(body.model_id, body.seq_id))
    return _accepted(request_id, body.model_id)


@router.post("/save_weights_external")
async def save_weights_external() -> JSONResponse:
    return error(400, "save_weights_external: not available on the local server (no external storage)")


@router.post("/get_info")
async def get_info(request: Request) -> dict[str, Any]:
    from envsuite.models import resolve_model

    body = await parse(request, types.GetInfoRequest)
    info = state_of(request).model(body.model_id).client.get_info()
    # The SDK loads the tokenizer by this id: a local directory works offline on this machine.
    tokenizer_dir = str(resolve_model(info.model_name or "").path) if info.model_name else None
    data = info.model_data.model_copy(update={"tokenizer_id": tokenizer_dir})
    return info.model_copy(update={"model_id": body.model_id, "model_data": data}).model_dump(mode="json")
