"""Session, configuration and future endpoints (``tinker/resources/service.py`` and ``futures.py``)."""

from __future__ import annotations

import asyncio

import tinker
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from tinker import types

from envsuite.serve._http import Unsupported, error, parse, state_of

router = APIRouter(prefix="/api/v1")

CLIENT_CONFIG = types.ClientConfigResponse(
    pjwt_auth_enabled=False,
    parallel_fwdbwd_chunks=False,
    proto_compress_fwdbwd=False,
    use_pyqwest_transport=False,
    sample_use_retrieve_futures=False,
    custom_loss_server_side=False,
    sample_join_sampling_session=False,
)
"""The flags this server gives every SDK: the plain code paths. Training requests are sent one at a
time in seq order (no parallel chunks), so the server runs them in the order they arrive; custom losses
run client-side; sampling results are fetched per request."""


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.post("/client/config")
async def client_config(request: Request) -> dict[str, object]:
    await parse(request, types.ClientConfigRequest)
    return CLIENT_CONFIG.model_dump()


@router.post("/client/dynamic_config")
async def client_dynamic_config(request: Request) -> dict[str, object]:
    await parse(request, types.ClientConfigRequest)
    return types.ClientDynamicConfigResponse(sample_cancel_enabled=True).model_dump()


@router.post("/auth/token")
async def auth_token() -> JSONResponse:
    return error(400, "this server takes the API key itself (X-API-Key); it issues no JWTs")


@router.post("/create_session")
async def create_session(request: Request) -> dict[str, object]:
    body = await parse(request, types.CreateSessionRequest)
    session = state_of(request).new_session(body.user_metadata or {})
    return types.CreateSessionResponse(session_id=session.session_id).model_dump()


@router.post("/session_heartbeat")
async def session_heartbeat(request: Request) -> JSONResponse:
    body = await parse(request, types.SessionHeartbeatRequest)
    state = state_of(request)
    with state.lock:
        session = state.sessions.get(body.session_id)
    if session is None or session.finished:
        # 410 tells the SDK the session is over (it stops heartbeating), e.g. after a server restart.
        return error(410, f"session {body.session_id!r} is not live on this server")
    state.session(body.session_id)
    return JSONResponse(types.SessionHeartbeatResponse().model_dump())


@router.post("/sessions/{session_id}/finish")
async def finish_session(session_id: str, request: Request) -> Response:
    await asyncio.to_thread(state_of(request).finish_session, session_id)
    return Response(status_code=200)


@router.get("/sessions/{session_id}")
async def get_session(session_id: str, request: Request) -> dict[str, object]:
    session = state_of(request).session(session_id)
    response = types.GetSessionResponse(
        training_run_ids=sorted(session.models), sampler_ids=sorted(session.samplers), user_metadata=None
    )
    return response.model_dump(mode="json")


@router.post("/telemetry")
async def telemetry(request: Request) -> dict[str, str]:
    """Accepted and dropped: nothing the SDK reports is kept."""
    await request.body()
    return {"status": "accepted"}


@router.get("/get_server_capabilities")
async def get_server_capabilities(request: Request) -> dict[str, object]:
    return state_of(request).rest.get_server_capabilities().result().model_dump(mode="json")


@router.post("/retrieve_future")
async def retrieve_future(request: Request) -> Response:
    body = await parse(request, types.FutureRetrieveRequest)
    state = state_of(request)
    reply = await state.futures.retrieve(body.request_id, state.config.poll_wait_s)
    if reply is None:
        return error(404, f"unknown request_id {body.request_id!r} (results are kept a few minutes)")
    if isinstance(reply.body, bytes):
        return Response(reply.body, media_type=reply.media_type)
    return JSONResponse(reply.body)


@router.post("/cancel_future")
async def cancel_future(request: Request) -> Response:
    payload = await request.json()
    if not isinstance(payload, dict) or not isinstance(payload.get("request_id"), str):
        raise Unsupported("cancel_future needs {'request_id': str}")
    state_of(request).futures.cancel(payload["request_id"])
    return Response(status_code=200)


@router.post("/retrieve_futures")
@router.post("/join_sampling_session")
@router.post("/create_custom_loss")
async def disabled_by_client_config() -> JSONResponse:
    return error(
        400, f"this server turns that path off in its client config ({tinker.__version__} SDK flags)"
    )
