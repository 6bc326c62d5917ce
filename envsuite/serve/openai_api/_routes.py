"""OpenAI-compatible routes: ``/completions``, ``/chat/completions`` and ``/models``, under
``/oai/api/v1`` (Tinker's address for them) and ``/v1`` (where most clients look).

They share the server's key check, body limit and samplers with the Tinker routes. A request is
validated (every parameter honoured or refused, ``_wire``), its model loaded (``_models``),
its messages rendered (``_chat``), shaped (``_structured``), sampled (``_sampling``) and, when the request
is captured, recorded with its exact token ids (``envsuite.serve.capture``). Replies are OpenAI's JSON, or server-sent
events when ``stream`` is set (with a final usage chunk when ``stream_options.include_usage``).
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from envsuite.serve._http import state_of
from envsuite.serve.openai_api._chat_route import chat_completions
from envsuite.serve.openai_api._completions_route import completions
from envsuite.serve.openai_api._http import PREFIXES, dump, openai_errors
from envsuite.serve.openai_api._models import list_models

router = APIRouter()


async def models(request: Request) -> Response:
    return JSONResponse(dump(await asyncio.to_thread(list_models, state_of(request))))


for _prefix in PREFIXES:
    router.add_api_route(f"{_prefix}/chat/completions", openai_errors(chat_completions), methods=["POST"])
    router.add_api_route(f"{_prefix}/completions", openai_errors(completions), methods=["POST"])
    router.add_api_route(f"{_prefix}/models", models, methods=["GET"])
