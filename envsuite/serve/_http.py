"""What every endpoint shares: the error shape, body parsing, and the server state of a request."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TypeVar

import pydantic
from fastapi import Request
from fastapi.responses import JSONResponse

from envsuite.serve._state import ServerState

M = TypeVar("M", bound=pydantic.BaseModel)
INLINE_PARSE_BYTES = 64 * 1024
"""Bodies up to this size are parsed on the event loop; larger ones in a worker thread, so a
multi-megabyte body does not hold up every other request (health checks, polls, streams)."""


class Unsupported(ValueError):
    """A call the local server does not serve (a 400 naming it, so the SDK does not retry)."""


@dataclass(frozen=True)
class Invalid:
    """A body that failed validation, said plainly: the field at fault (if any) and what is wrong."""

    param: str | None
    message: str


def describe_invalid(exc: pydantic.ValidationError) -> Invalid:
    """The first error of ``exc`` as one line naming its field; a body that is not JSON says so."""
    first = exc.errors()[0]
    if first["type"] == "json_invalid":
        reason = first.get("ctx", {}).get("error", first["msg"])
        return Invalid(None, f"the body is not valid JSON: {reason}")
    param = ".".join(str(p) for p in first["loc"]) or None
    message = first["msg"]
    if first["type"] == "finite_number":
        message = "must be a finite number"
    return Invalid(param, f"{param}: {message}" if param else f"the body: {message}")


def error(status: int, message: str, category: str = "user") -> JSONResponse:
    """The one error shape every Tinker endpoint uses."""
    return JSONResponse({"error": message, "category": category}, status_code=status)


async def validate_json(raw: bytes, model: type[M]) -> M:
    """``raw`` validated as ``model``, off the event loop when it is large."""
    if len(raw) <= INLINE_PARSE_BYTES:
        return model.model_validate_json(raw)
    return await asyncio.to_thread(model.model_validate_json, raw)


async def parse(request: Request, model: type[M]) -> M:
    """The request's JSON body validated as ``model`` (a ``tinker.types`` request)."""
    return await validate_json(await request.body(), model)


def state_of(request: Request) -> ServerState:
    """The server state the app was built with."""
    state: ServerState = request.app.state.serve
    return state
