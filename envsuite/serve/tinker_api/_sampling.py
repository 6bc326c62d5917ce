"""Sampling endpoints (``tinker/resources/sampling.py`` and the sampling-session calls).

Every sample request of every session goes to a local sampling client, whose engine batches all
requests in flight on the same weights; the result comes back through ``retrieve_future`` as the
SDK's protobuf ``SampleResponse``. Sequence ids are fixed when the request arrives (``<request id>:<i>``,
in the answer's ``sample_sequence_ids``, which the SDK stamps on the sequences); with
``record_stability_info`` the sequences are recorded under them, in the sampling session's session,
before the result can be retrieved.

envsuite's extension: ``sampling_params.constraint`` (``{"kind": ..., "spec": ...}``, as
``envsuite.constraints.Constraint.to_dict`` writes it) holds every sample to its language, as on the local
backend. The real SDK never sends it (it writes only its own fields), so its requests sample freely.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import math
from typing import Any

from fastapi import APIRouter, Request
from tinker import types

from envsuite.backends.local import LocalSamplingClient
from envsuite.backends.vllm import MAX_TOPK_LOGPROBS
from envsuite.constraints import Constraint, ConstraintError
from envsuite.serve._config import ServeConfig
from envsuite.serve._futures import then
from envsuite.serve._http import Unsupported, parse, state_of, validate_json

router = APIRouter(prefix="/api/v1")


@router.post("/create_sampling_session")
async def create_sampling_session(request: Request) -> dict[str, Any]:
    body = await parse(request, types.CreateSamplingSessionRequest)
    state = state_of(request)
    state.session(body.session_id)
    sampler_id = f"{body.session_id}:sample:{body.sampling_session_seq_id}"
    client = await asyncio.to_thread(state.scoped_sampler, body.base_model, body.model_path)
    vllm_model = await asyncio.to_thread(state.vllm_name, body.base_model, body.model_path)
    state.add_sampler(body.session_id, sampler_id, client, vllm_model)
    return types.CreateSamplingSessionResponse(sampling_session_id=sampler_id).model_dump()


@router.get("/samplers/{sampler_id}")
async def get_sampler(sampler_id: str, request: Request) -> dict[str, Any]:
    sampler = state_of(request).sampler(sampler_id)
    response = types.GetSamplerResponse(
        sampler_id=sampler_id, base_model=sampler.base_model, model_path=sampler.model_path
    ).model_dump(mode="json")
    if sampler.vllm_model is not None:  # envsuite's extension: the name its samples come from on vLLM
        response["vllm_model"] = sampler.vllm_model
    return response


@router.post("/asample")
async def asample(request: Request) -> dict[str, Any]:
    raw = await request.body()
    body = await validate_json(raw, types.SampleRequest)
    state = state_of(request)
    params = _bounded(body.sampling_params, state.config)
    constraint = _constraint(raw)
    if body.num_samples > state.config.max_samples:
        raise Unsupported(
            f"num_samples {body.num_samples} is over this server's limit of {state.config.max_samples} "
            "per request (envsuite serve --max-samples); split the request"
        )
    session_id = None
    if body.sampling_session_id is not None:
        sampler = state.sampler(body.sampling_session_id)
        client, session_id, vllm_model = sampler.client, sampler.session_id, sampler.vllm_model
    else:
        client = await asyncio.to_thread(state.scoped_sampler, body.base_model, body.model_path)
        vllm_model = await asyncio.to_thread(state.vllm_name, body.base_model, body.model_path)
    on_vllm = vllm_model is not None and _samples_on_vllm(body, constraint)
    if on_vllm:
        assert state.vllm is not None
        state.vllm.check_up()  # down: a 503 with Retry-After, which the SDK retries
    if constraint is not None:
        try:
            await asyncio.to_thread(client.compile_constraint, constraint)
        except ConstraintError as exc:
            raise Unsupported(f"sampling_params.constraint: {exc}") from None
    if body.record_stability_info and session_id is None:
        raise Unsupported("record_stability_info needs a sampling session (records belong to a session)")
    # A retried request (same session, seq id and body) gets the first one's id.
    key = ("sample", body.sampling_session_id, body.seq_id, hashlib.sha256(raw).hexdigest())

    def begin(request_id: str) -> Any:
        if on_vllm:
            assert state.vllm is not None and vllm_model is not None
            # replay: the SDK waits on the future, so a server lost meanwhile is waited for, not a failure.
            sampled = state.vllm.sample(
                vllm_model, client.get_base_model(), body.prompt, body.num_samples, params,
                body.topk_sample_logprobs, replay=True,
            )  # fmt: skip
        else:
            sampled = _sample_locally(client, body, params, constraint)
        if not body.record_stability_info:
            return sampled
        assert session_id is not None
        records, prompt_length = state.sequences.scope(session_id), body.prompt.length
        ids = sequence_ids(request_id, body.num_samples)

        def record(response: types.SampleResponse) -> types.SampleResponse:
            records.record_response(prompt_length, response, ids)
            return response

        return then(sampled, record)

    request_id = state.futures.start_with_id(begin, key=key if body.seq_id is not None else None)
    return types.UntypedAPIFuture(
        request_id=request_id, sample_sequence_ids=sequence_ids(request_id, body.num_samples)
    ).model_dump(exclude_none=True)


def _sample_locally(
    client: LocalSamplingClient,
    body: types.SampleRequest,
    params: types.SamplingParams,
    constraint: Constraint | None,
) -> concurrent.futures.Future[types.SampleResponse]:
    return client.sample(
        body.prompt,
        body.num_samples,
        params,
        include_prompt_logprobs=bool(body.prompt_logprobs),
        topk_prompt_logprobs=body.topk_prompt_logprobs,
        topk_sample_logprobs=body.topk_sample_logprobs,
        target_prompt_logprobs=body.target_prompt_logprobs,  # type: ignore[arg-type]  # refused as unsupported
        prompt_alt_tokens_k=body.prompt_alt_tokens_k,
        prompt_logprobs_last_n=body.prompt_logprobs_last_n,
        constraint=constraint,
    ).future()


def _samples_on_vllm(body: types.SampleRequest, constraint: Constraint | None) -> bool:
    """Whether a request on a vLLM-sampling server goes to vLLM: sampling does (with its top-k
    alternatives, ``topk_sample_logprobs``, as vLLM reports them); prompt logprobs (``compute_logprobs``)
    are scoring, done by the local engine on the same weights; what vLLM's replies here cannot carry (a
    constraint) is refused rather than sampled elsewhere."""
    if not 0 <= body.topk_sample_logprobs <= MAX_TOPK_LOGPROBS:
        raise Unsupported(
            f"topk_sample_logprobs must be in [0, {MAX_TOPK_LOGPROBS}], got {body.topk_sample_logprobs}"
        )
    if constraint is not None:
        raise Unsupported(
            "sampling_params.constraint: not served when sampling on vLLM (--sampling-engine vllm)"
        )
    return not (body.prompt_logprobs or body.topk_prompt_logprobs or body.prompt_logprobs_last_n)


def _bounded(params: types.SamplingParams, config: ServeConfig) -> types.SamplingParams:
    """``params`` under the server's token cap (a request asking more gets the cap, as on the OpenAI
    routes); a non-finite number is refused by name rather than sampled with."""
    for name in ("temperature", "top_p"):
        if not math.isfinite(getattr(params, name)):
            raise Unsupported(f"sampling_params.{name} must be a finite number")
    return params.model_copy(update={"max_tokens": config.tokens_for(params.max_tokens)})


def _constraint(raw: bytes) -> Constraint | None:
    """``sampling_params.constraint`` (envsuite's extension, ``Constraint.to_dict()``'s shape): the Tinker
    types drop unknown fields, so it is read from the body itself. Absent: sampling is free."""
    try:
        value = json.loads(raw).get("sampling_params", {}).get("constraint")
    except (ValueError, AttributeError):
        return None  # the typed parse has already accepted the body: a shape without the extension
    if value is None:
        return None
    try:
        return Constraint.from_dict(value)
    except ConstraintError as exc:
        raise Unsupported(f"sampling_params.constraint: {exc}") from None


def sequence_ids(request_id: str, num_samples: int) -> list[str]:
    """The ids of a sampling request's sequences (unique: request ids carry a per-process random prefix)."""
    return [f"{request_id}:{i}" for i in range(num_samples)]
