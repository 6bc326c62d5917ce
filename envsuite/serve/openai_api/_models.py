"""What an OpenAI request's ``model`` names, and the ``/models`` listing.

A model is, in lookup order: a ``tinker://`` checkpoint path (a sampler saved a moment ago by a run
that is still training works at once: it is read from disk when first asked for); a live sampling
session id (``<session>:sample:<n>``, e.g. the in-memory weights of
``save_weights_and_get_sampling_client``); a checkpoint or model directory inside the server's allowed
directories; or a base model name. Every name but a live session goes through the server's
:class:`~envsuite.serve._paths.PathScope`, so a path elsewhere on the disk is a 404 like any unknown
name. Checkpoints and base models share the server's samplers (``ServerState.shared_sampler``), so
OpenAI and Tinker requests on the same weights batch together in one engine.

Under ``--sampling-engine vllm`` the same weights are also named on the vLLM server (:class:`VllmTarget`:
the base model's name there, a snapshot's published adapter, a checkpoint published on first use), and
the request samples there; the local client still gives the tokenizer, the chat format and the
context length, so the prompt's token ids are the ones vLLM samples after.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass
from typing import Any

from envsuite.backends.local import CheckpointError, LocalSamplingClient
from envsuite.models import KNOWN_MODELS, is_checkpoint_dir
from envsuite.serve._errors import NotFound
from envsuite.serve._state import ServerState
from envsuite.serve._vllm import VllmEngine
from envsuite.serve.openai_api._wire import ModelCard, ModelList, OpenAIError


@dataclass(frozen=True)
class VllmTarget:
    """Where a request samples under ``--sampling-engine vllm``: the server and the name there."""

    engine: VllmEngine
    model: str
    """The base model's name on the server, or a published adapter's."""


@dataclass(frozen=True)
class ServedModel:
    """The sampling client behind a request's ``model``."""

    name: str
    """As the client wrote it (echoed in replies)."""
    client: LocalSamplingClient
    base_model: str
    """Whose tokenizer and chat format apply."""
    vllm: VllmTarget | None = None
    """Set when the request samples on vLLM rather than on ``client``'s engine."""


def _vllm_name(state: ServerState, name: str) -> str | None:
    """The vLLM name of the weights ``name`` names (publishing a checkpoint the first time); None
    without vLLM. Blocking: called off the event loop."""
    if state.vllm is None:
        return None
    if name.startswith("tinker://"):
        return state.vllm_name(None, name)
    with state.lock:
        live = state.samplers.get(name)
    if live is not None:
        if live.vllm_model is None:
            raise ValueError(f"sampling session {name!r} is not published to vLLM")
        return live.vllm_model
    resolved = state.scope.model(name)
    if is_checkpoint_dir(resolved):
        return state.vllm_name(None, resolved)
    return state.vllm_name(resolved, None)


def _load(state: ServerState, name: str) -> LocalSamplingClient:
    if name.startswith("tinker://"):
        return state.shared_sampler(None, state.scope.checkpoint(name))
    with state.lock:
        live = state.samplers.get(name)
    if live is not None:
        return live.client
    resolved = state.scope.model(name)
    if is_checkpoint_dir(resolved):
        return state.shared_sampler(None, resolved)
    return state.shared_sampler(resolved, None)


async def serve_model(state: ServerState, name: str) -> ServedModel:
    """The served model a request names; a 404 (``model_not_found``) for any name the server lacks."""
    if state.vllm is not None:
        state.vllm.check_up()  # down: a 503 with Retry-After now, before any work
    try:
        client = await asyncio.to_thread(_load, state, name)
        vllm_model = await asyncio.to_thread(_vllm_name, state, name)
    except NotFound as exc:
        raise OpenAIError(404, str(exc), param="model", code="model_not_found") from exc
    except (CheckpointError, ValueError) as exc:
        raise OpenAIError(400, f"model {name!r} cannot be loaded: {exc}", param="model") from exc
    target = None if state.vllm is None or vllm_model is None else VllmTarget(state.vllm, vllm_model)
    return ServedModel(name, client, client.get_base_model(), target)


def list_models(state: ServerState) -> ModelList:
    """The known base models and every sampler checkpoint under the state dir (by ``tinker://`` path)."""
    now = int(time.time())
    cards = [ModelCard(id=name, created=now) for name in sorted(KNOWN_MODELS)]
    listing = state.rest.list_user_checkpoints(limit=1000).result()
    for checkpoint in listing.checkpoints:
        if checkpoint.checkpoint_type == "sampler":
            cards.append(ModelCard(id=checkpoint.tinker_path, created=int(checkpoint.time.timestamp())))
    return ModelList(data=cards)


@functools.lru_cache(maxsize=16)
def _longest_token_chars(tokenizer: Any) -> int:
    """The most characters one token of ``tokenizer`` can stand for (its longest vocabulary entry)."""
    return max((len(token) for token in tokenizer.get_vocab()), default=1)


def refuse_beyond_context(served: ServedModel, chars: int, param: str) -> None:
    """Refuse, before tokenizing it, a prompt whose text cannot fit the model's context however it is
    tokenized (no token stands for more characters than the longest one): tokenizing megabytes costs
    seconds of CPU, only to be refused as too long afterwards."""
    context = served.client.max_context
    if chars > context * _longest_token_chars(served.client.get_tokenizer()):
        raise OpenAIError(
            400,
            f"this model's context is {context} tokens; the prompt's {chars} characters cannot fit in it",
            param=param,
            code="context_length_exceeded",
        )
