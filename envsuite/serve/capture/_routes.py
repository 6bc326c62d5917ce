"""Capture routes: list a capture set's episodes, read one, and score one (a posted reward or a catalog
env's grader). Under the OpenAI prefixes, and for the capture set a request names the same way its
sampling calls did (``X-Envsuite-Capture`` or a capture key)."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from envsuite.capture import CaptureStore, UnknownEpisodeError, grade_episode
from envsuite.registration import registry
from envsuite.serve._http import state_of, validate_json
from envsuite.serve.capture._requests import capture_set, episode_summary
from envsuite.serve.openai_api._http import PREFIXES, openai_errors
from envsuite.serve.openai_api._wire import OpenAIError

router = APIRouter()
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9_+.-]*$")
"""What precedes ``:`` in an env id that names a server or a file (``openenv:``, ``file:``, ``http:``)."""


class RewardBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reward: float | None = None
    rewards: list[float] | None = None
    """One per choice of the episode's last call (instead of ``reward``, which applies to all)."""


class GradeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    env_id: str
    seed: int
    split: Literal["train", "test"] = "train"
    env_kwargs: dict[str, Any] = Field(default_factory=dict)


def _store(request: Request) -> CaptureStore:
    name = capture_set(request)
    if name is None:
        raise OpenAIError(400, "name the capture set: X-Envsuite-Capture: NAME, or use its capture key")
    try:
        return state_of(request).captures.get(name)
    except ValueError as exc:
        raise OpenAIError(400, str(exc), param="headers") from exc


def _episode_id(request: Request) -> str:
    return str(request.path_params["episode_id"])


T = TypeVar("T")


def _known(call: Callable[[], T]) -> T:
    try:
        return call()
    except UnknownEpisodeError as exc:
        raise OpenAIError(404, str(exc), param="episode_id", code="episode_not_found") from exc
    except ValueError as exc:
        raise OpenAIError(400, str(exc), param="episode_id") from exc


async def list_episodes(request: Request) -> Response:
    store = _store(request)
    episodes = await asyncio.to_thread(store.episodes)
    data = [_known(functools.partial(episode_summary, store, e.episode_id, calls=False)) for e in episodes]
    return JSONResponse({"object": "list", "data": data})


async def get_episode(request: Request) -> Response:
    store, episode_id = _store(request), _episode_id(request)
    return JSONResponse(_known(lambda: episode_summary(store, episode_id, calls=True)))


async def post_reward(request: Request) -> Response:
    store, episode_id = _store(request), _episode_id(request)
    body = await validate_json(await request.body(), RewardBody)
    if (body.reward is None) == (body.rewards is None):
        raise OpenAIError(400, "give either reward (one number) or rewards (one per choice)", param="reward")
    rewards = body.rewards if body.rewards is not None else [float(body.reward or 0.0)]
    score = _known(lambda: store.score(episode_id, rewards, "posted"))
    return JSONResponse({"id": episode_id, "rewards": score.rewards, "source": score.source})


def _refused(env_id: str) -> OpenAIError:
    """The one answer for every env id the grader will not build, whatever it names (a URL on this
    machine or elsewhere, a file): nothing is contacted, so nothing about the target comes back."""
    shown = env_id if len(env_id) <= 200 else f"{env_id[:200]}..."
    return OpenAIError(
        400,
        f"cannot grade with {shown!r}: the grader takes catalog env ids (`envsuite list`) and the "
        "OpenEnv servers this server was started with (--grader-openenv URL)",
        param="env_id",
    )


def check_grader(env_id: str, openenv_urls: tuple[str, ...]) -> None:
    """Refuse an env id the capture grader must not build: anything but a catalog id (an unknown one
    gets the catalog's suggestion) or ``openenv:<url>`` for a URL the operator listed."""
    scheme, colon, rest = env_id.partition(":")
    if colon and _SCHEME.match(scheme):
        allowed = {url.rstrip("/") for url in openenv_urls}
        if scheme == "openenv" and rest.rstrip("/") in allowed:
            return
        raise _refused(env_id)
    try:
        registry.spec(env_id)
    except (LookupError, ValueError) as exc:
        raise OpenAIError(400, f"cannot grade with that env_id: {exc}", param="env_id") from exc


async def post_grade(request: Request) -> Response:
    store, episode_id = _store(request), _episode_id(request)
    body = await validate_json(await request.body(), GradeBody)
    check_grader(body.env_id, state_of(request).config.grader_openenv_urls)
    episode = _known(lambda: store.episode(episode_id))
    try:
        rewards = await asyncio.to_thread(
            asyncio.run,
            grade_episode(episode, body.env_id, body.seed, split=body.split, env_kwargs=body.env_kwargs),
        )
    except (LookupError, ValueError, TypeError) as exc:
        raise OpenAIError(400, f"cannot grade with {body.env_id!r}: {exc}", param="env_id") from exc
    score = store.score(episode_id, rewards, f"grader:{body.env_id}@{body.seed}")
    return JSONResponse({"id": episode_id, "rewards": score.rewards, "source": score.source})


for _prefix in PREFIXES:
    router.add_api_route(f"{_prefix}/episodes", openai_errors(list_episodes), methods=["GET"])
    router.add_api_route(f"{_prefix}/episodes/{{episode_id}}", openai_errors(get_episode), methods=["GET"])
    router.add_api_route(
        f"{_prefix}/episodes/{{episode_id}}/reward", openai_errors(post_reward), methods=["POST"]
    )
    router.add_api_route(
        f"{_prefix}/episodes/{{episode_id}}/grade", openai_errors(post_grade), methods=["POST"]
    )
