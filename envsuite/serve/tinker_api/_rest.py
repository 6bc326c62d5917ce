"""REST endpoints (``tinker/lib/public_interfaces/rest_client.py``): runs and checkpoints on disk.

They read the state dir through the local backend's REST client, reporting ``tinker://`` paths. A
training run is named by its run id (what ``tinker://`` paths carry) or, while its session lives, by
the SDK's model id. Accounts, billing, projects, publishing and external storage are the hosted
service's: those answer 400 with the reason.
"""

from __future__ import annotations

from typing import Any

import pydantic
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from tinker import types

from envsuite.serve._http import Unsupported, error, parse, state_of

router = APIRouter(prefix="/api/v1")
_HOSTED_ONLY = "not available on the local server: {} belong to the hosted service's accounts"


def _dump(model: pydantic.BaseModel) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(mode="json")
    return dumped


@router.get("/training_runs")
async def list_training_runs(request: Request, limit: int = 20, offset: int = 0) -> dict[str, Any]:
    return _dump(state_of(request).rest.list_training_runs(limit, offset).result())


@router.get("/training_runs/{training_run_id}")
async def get_training_run(training_run_id: str, request: Request) -> dict[str, Any]:
    state = state_of(request)
    return _dump(state.rest.get_training_run(state.run_id_of(training_run_id)).result())


@router.get("/training_runs/{training_run_id}/checkpoints")
async def list_checkpoints(training_run_id: str, request: Request) -> dict[str, Any]:
    state = state_of(request)
    return _dump(state.rest.list_checkpoints(state.run_id_of(training_run_id)).result())


@router.delete("/training_runs/{training_run_id}/checkpoints/{segment}/{name}")
async def delete_checkpoint(training_run_id: str, segment: str, name: str, request: Request) -> JSONResponse:
    state = state_of(request)
    state.rest.delete_checkpoint(state.run_id_of(training_run_id), f"{segment}/{name}").result()
    return JSONResponse(None)


@router.put("/training_runs/{training_run_id}/checkpoints/{segment}/{name}/ttl")
async def set_checkpoint_ttl(training_run_id: str, segment: str, name: str, request: Request) -> JSONResponse:
    payload = await request.json()
    ttl = payload.get("ttl_seconds") if isinstance(payload, dict) else None
    if ttl is not None and (not isinstance(ttl, int) or ttl < 1):
        raise Unsupported(f"ttl_seconds must be a positive integer or null, got {ttl!r}")
    state = state_of(request)
    path = f"tinker://{state.run_id_of(training_run_id)}/{segment}/{name}"
    state.rest.set_checkpoint_ttl_from_tinker_path(path, ttl).result()
    return JSONResponse(None)


@router.post("/weights_info")
async def weights_info(request: Request) -> dict[str, Any]:
    payload = await request.json()
    if not isinstance(payload, dict) or not isinstance(payload.get("tinker_path"), str):
        raise Unsupported("weights_info needs {'tinker_path': str}")
    state = state_of(request)
    path = state.scope.checkpoint(payload["tinker_path"])
    return _dump(state.rest.get_weights_info_by_tinker_path(path).result())


@router.get("/checkpoints")
async def list_user_checkpoints(request: Request, limit: int = 100, offset: int = 0) -> dict[str, Any]:
    return _dump(state_of(request).rest.list_user_checkpoints(limit, offset).result())


@router.post("/copy_weights")
async def copy_weights(request: Request) -> dict[str, Any]:
    body = await parse(request, types.CopyWeightsRequest)
    state = state_of(request)
    source = state.scope.checkpoint(body.source_path)
    path = state.rest.copy_weights(source, ttl_seconds=body.ttl_seconds).result()
    return types.CopyWeightsResponse(tinker_path=path).model_dump()


@router.post("/training_runs/{training_run_id}/checkpoints/{segment}/{name}/publish")
@router.delete("/training_runs/{training_run_id}/checkpoints/{segment}/{name}/publish")
async def publish() -> JSONResponse:
    return error(400, _HOSTED_ONLY.format("published checkpoints"))


@router.get("/training_runs/{training_run_id}/checkpoints/{segment}/{name}/external_weights_urls")
async def external_weights_urls() -> JSONResponse:
    return error(400, "not available on the local server: there is no external weights storage")


@router.get("/sessions")
@router.post("/sessions/search")
@router.get("/sessions/{session_id}/trace_export")
@router.put("/sessions/{session_id}/project")
async def session_records() -> JSONResponse:
    return error(400, _HOSTED_ONLY.format("session listings, searches, traces and projects"))


@router.get("/audit")
@router.get("/billing/usage/events")
@router.get("/billing/usage/checkpoints/current")
@router.get("/auth/apikey/me")
async def accounts() -> JSONResponse:
    return error(400, _HOSTED_ONLY.format("audit logs, billing and API keys"))
