"""What every endpoint shares: the error shape, body parsing, and the server state of a request."""

from __future__ import annotations

from typing import TypeVar

import pydantic
from fastapi import Request
from fastapi.responses import JSONResponse

from envsuite.serve._state import ServerState

M = TypeVar("M", bound=pydantic.BaseModel)


class Unsupported(ValueError):
    """A call the local server does not serve (a 400 naming it, so the SDK does not retry)."""


def error(status: int, message: str, category: str = "user") -> JSONResponse:
    """The one error shape every endpoint uses."""
    return JSONResponse({"error": message, "category": category}, status_code=status)


async def parse(request: Request, model: type[M]) -> M:
    """The request's JSON body validated as ``model`` (a ``tinker.types`` request)."""
    return model.model_validate_json(await request.body())


def state_of(request: Request) -> ServerState:
    """The server state the app was built with."""
    state: ServerState = request.app.state.serve
    return state
