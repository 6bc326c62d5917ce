"""Serve any catalog env over OpenEnv's protocol (``envsuite serve-env ID``, or :func:`create_app`).

Each OpenEnv session (a WebSocket from ``EnvClient``) gets its own :class:`EnvsuiteEnvironment`, and each
``reset`` makes a fresh single-use catalog env for the requested seed. Seeds survive the wire:
``reset(seed=s)`` twice plays the same episode, and sessions that reset with one seed (a group) share
it; without a seed the server draws one and reports it in the observation, so any episode can be
replayed. The app also answers ``GET /envsuite`` with the env's spec (kind, reward range, turn bound),
which the ``openenv:`` catalog entry reads.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict, Unpack, cast

from openenv.core import Environment, create_fastapi_app
from openenv.core.env_server.types import EnvironmentMetadata

from envsuite.adapters.openenv._models import EnvsuiteAction, EnvsuiteObservation, EnvsuiteState, SpecDocument
from envsuite.catalog._make import (
    DEFAULT_MAX_CONTEXT_TOKENS,
    DEFAULT_MODEL,
    RendererConfig,
    available_spec,
    make_env,
)
from envsuite.core import (
    Env,
    InvalidActionError,
    Split,
    StepResult,
    StopCondition,
    StopReason,
    as_overflow,
    stop_reason_from_metrics,
    tokens_outside_vocabulary,
)
from envsuite.renderers import reply_to_tokens

if TYPE_CHECKING:
    from fastapi import FastAPI

DEFAULT_MAX_SESSIONS = 256
SPEC_ROUTE = "/envsuite"


@dataclass(frozen=True)
class ServeSettings:
    """What a server serves: the env, its keyword arguments, and the tokenizer it renders for."""

    env_id: str
    env_kwargs: dict[str, object] = field(default_factory=dict)
    renderer: RendererConfig = field(default_factory=lambda: RendererConfig(DEFAULT_MODEL))
    max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS


class _StepFields(TypedDict, total=False):
    """The observation fields a step or reset sets (the conversation, stop and seed are always set)."""

    done: bool
    reward: float
    stop_reason: str
    metrics: dict[str, float]
    logs: dict[str, str | bool | int | float]
    prompt_tokens: list[int]


class EnvsuiteEnvironment(Environment[EnvsuiteAction, EnvsuiteObservation, EnvsuiteState]):
    """One OpenEnv session over a catalog env; every ``reset`` starts a new episode."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session owns its env; catalog envs own their RNGs

    def __init__(self, settings: ServeSettings) -> None:
        super().__init__()
        self.settings = settings
        self._env: Env | None = None
        self._stop: list[int | str] = []
        self._state = EnvsuiteState(env_id=settings.env_id)

    # -- OpenEnv's interface (async; the sync forms exist for sync callers) --------------------

    async def reset_async(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: object
    ) -> EnvsuiteObservation:
        split: Split = "test" if kwargs.get("split") == "test" else "train"
        seed = secrets.randbelow(2**31) if seed is None else int(seed)
        s = self.settings
        self._env = make_env(
            s.env_id,
            seed=seed,
            split=split,
            model=None,  # the renderer config names the model
            renderer=s.renderer,
            max_context_tokens=s.max_context_tokens,
            **s.env_kwargs,
        )
        self._state = EnvsuiteState(
            episode_id=episode_id or uuid.uuid4().hex, env_id=s.env_id, seed=seed, split=split
        )
        start = await self._env.initial_observation()
        overflow = as_overflow(start)
        if overflow is not None:
            self._state.done = True
            reason = stop_reason_from_metrics(overflow.metrics) or StopReason.MAX_TOKENS.value
            return self._observation(done=True, reward=overflow.reward, stop_reason=reason)
        prompt, stop = start  # type: ignore[misc]  # not an overflow, so the (observation, stop) pair
        self._stop = list(stop)
        return self._observation(prompt_tokens=prompt.to_ints())

    async def step_async(
        self, action: EnvsuiteAction, timeout_s: float | None = None, **kwargs: object
    ) -> EnvsuiteObservation:
        if self._env is None or self._state.done:
            raise RuntimeError("no episode in progress: call reset first (episodes are single-use)")
        renderer = self.settings.renderer.build()
        if action.tokens is not None:
            outside = tokens_outside_vocabulary(action.tokens, renderer.vocab_size)
            if outside is not None:
                # Refused before the env sees it: the client gets the reason as the step's error and the
                # episode goes on (a client bug, not a move).
                raise InvalidActionError(f"invalid action: {outside}")
        tokens = (
            action.tokens
            if action.tokens is not None
            else reply_to_tokens(renderer, action.text or "", cast(StopCondition, self._stop))
        )
        self._state.step_count += 1
        try:
            result = await asyncio.wait_for(self._env.step(list(tokens)), timeout_s)
        except Exception as exc:  # the env failing is a defined outcome for the client, not a dropped session
            self._state.done = True
            error = f"{type(exc).__name__}: {exc}"[:500]
            return self._observation(
                done=True, reward=0.0, stop_reason=StopReason.ENV_ERROR.value, logs={"error": error}
            )
        return self._from_step(result)

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: object
    ) -> EnvsuiteObservation:
        return asyncio.run(self.reset_async(seed, episode_id, **kwargs))

    def step(
        self, action: EnvsuiteAction, timeout_s: float | None = None, **kwargs: object
    ) -> EnvsuiteObservation:
        return asyncio.run(self.step_async(action, timeout_s, **kwargs))

    @property
    def state(self) -> EnvsuiteState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        env_spec = available_spec(self.settings.env_id)
        return EnvironmentMetadata(
            name=env_spec.id, description=env_spec.description or env_spec.id, version=str(env_spec.version)
        )

    # -- helpers -------------------------------------------------------------------------------

    def _from_step(self, result: StepResult) -> EnvsuiteObservation:
        self._stop = list(result.next_stop_condition)
        metrics = {k: float(v) for k, v in result.metrics.items()}
        logs = {k: v for k, v in result.logs.items() if isinstance(v, str | int | float)}
        if result.episode_done:
            self._state.done = True
            reason = stop_reason_from_metrics(result.metrics) or StopReason.COMPLETED.value
            return self._observation(
                done=True, reward=result.reward, stop_reason=reason, metrics=metrics, logs=logs
            )
        prompt_tokens = result.next_observation.to_ints()
        return self._observation(
            reward=result.reward, metrics=metrics, logs=logs, prompt_tokens=prompt_tokens
        )

    def _observation(self, **fields: Unpack[_StepFields]) -> EnvsuiteObservation:
        messages = [dict(m) for m in self._env.conversation()] if self._env is not None else []
        return EnvsuiteObservation(
            messages=[{"role": str(m["role"]), "content": str(m["content"])} for m in messages],
            stop=self._stop,
            seed=self._state.seed,
            **fields,
        )


def spec_document(env_id: str) -> SpecDocument:
    """What ``GET /envsuite`` answers: enough for a client to build an ``openenv:`` catalog spec."""
    env_spec = available_spec(env_id)
    return {
        "env_id": env_spec.id,
        "kind": env_spec.kind.value,
        "reward_range": list(env_spec.reward_range),
        "max_turns": env_spec.max_turns,
        "description": env_spec.description,
    }


def create_app(
    env_id: str,
    *,
    model: str = DEFAULT_MODEL,
    renderer_name: str | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS,
    **env_kwargs: object,
) -> FastAPI:
    """A FastAPI app serving ``env_id`` over OpenEnv's HTTP/WebSocket protocol (run it with uvicorn)."""
    env_spec = available_spec(env_id)
    settings = ServeSettings(
        env_spec.id,
        env_spec.resolve_kwargs(env_kwargs),
        RendererConfig(model_name=model, renderer_name=renderer_name),
        max_context_tokens,
    )
    settings.renderer.build()  # fail now, not in the first session, if the tokenizer is missing
    app: FastAPI = create_fastapi_app(
        functools.partial(EnvsuiteEnvironment, settings),
        EnvsuiteAction,
        EnvsuiteObservation,
        max_concurrent_envs=max_sessions,
        env_name=env_spec.base_id.replace("/", "_"),
        state_cls=EnvsuiteState,
    )
    document = spec_document(env_spec.id)
    app.add_api_route(SPEC_ROUTE, lambda: document, methods=["GET"], tags=["envsuite"])
    return app


def serve(
    env_id: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    model: str = DEFAULT_MODEL,
    renderer_name: str | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS,
    **env_kwargs: object,
) -> None:
    """Serve until interrupted (what ``envsuite serve-env`` runs); the other arguments are
    :func:`create_app`'s."""
    import uvicorn

    app = create_app(
        env_id,
        model=model,
        renderer_name=renderer_name,
        max_sessions=max_sessions,
        max_context_tokens=max_context_tokens,
        **env_kwargs,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")
