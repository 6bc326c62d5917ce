"""Any OpenEnv server as a catalog env: the ``openenv:<server URL>`` entry.

``envsuite.make_env("openenv:http://127.0.0.1:8000", seed=3)`` (and ``make_group_builder``,
``envsuite train``, ``envsuite check``, ``envsuite bench``) gives an :class:`OpenEnvEnv`: a token-level
env whose episode lives on the server, one WebSocket session per env, driven through OpenEnv's own
``GenericEnvClient``. The seed goes to the server's ``reset``, so a group's members (one seed) share
the episode. Observations become chat messages rendered with the policy's renderer; the policy's reply
goes back as text (``{"text": ...}``, the field OpenEnv chat envs and envsuite's server take).

A server that dies or stops answering mid-episode ends the episode with ``StopReason.ENV_ERROR`` and
the reason in the logs (after at most ``message_timeout_s``), never a hang.

The spec comes from ``GET <url>/envsuite`` when the server is envsuite's own (kind, reward range, turn
bound); other OpenEnv servers get a generic multi-turn spec.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Protocol, cast

# Imported with the module, never inside a coroutine: OpenEnv's import pulls in gradio, whose import
# runs ast.parse, and under a nested event loop (inspect-ai applies nest_asyncio in the process)
# Python 3.11's parser fails with "AST constructor recursion depth mismatch".
from openenv.core import GenericEnvClient

from envsuite.catalog.registration import EnvKind, EnvSpec
from envsuite.core import (
    ActionExtra,
    Env,
    EnvContext,
    InitialObservationOverflow,
    Message,
    Observation,
    StepResult,
    StopReason,
    tokens_outside_vocabulary,
)

if TYPE_CHECKING:
    from envsuite.adapters.openenv._models import SpecDocument

SCHEME = "openenv"
TEXT_KEYS = ("prompt", "text", "message", "content", "question", "observation")
_spec_cache: dict[str, EnvSpec] = {}


class _StepResult(Protocol):
    """What OpenEnv's client returns from ``reset`` and ``step`` (OpenEnv ships no type information)."""

    @property
    def observation(self) -> object:
        """The server's observation as JSON: a dict (envsuite servers send the whole conversation)."""
        ...

    @property
    def reward(self) -> float | None: ...

    @property
    def done(self) -> bool: ...


class _Session(Protocol):
    """The slice of OpenEnv's ``GenericEnvClient`` an episode uses: one WebSocket session."""

    async def reset(self, *, seed: int, split: str) -> _StepResult: ...

    async def step(self, action: dict[str, str]) -> _StepResult: ...

    async def close(self) -> None: ...


class OpenEnvEnv(Env):
    """One episode on an OpenEnv server (single-use, like every envsuite env)."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        url: str,
        action_field: str = "text",
        message_timeout_s: float = 60.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self.ctx = ctx
        self.url = url
        self.action_field = action_field
        self.message_timeout_s = message_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._client: _Session | None = None
        self._messages: list[Message] = []
        self._stop = ctx.renderer.get_stop_sequences()

    async def initial_observation(
        self,
    ) -> tuple[Observation, list[int] | list[str]] | InitialObservationOverflow:
        client: _Session = GenericEnvClient(
            base_url=self.url,
            connect_timeout_s=self.connect_timeout_s,
            message_timeout_s=self.message_timeout_s,
        )
        self._client = client
        try:
            result = await client.reset(seed=self.ctx.seed, split=self.ctx.split)
        except BaseException:
            await self._close()
            raise
        self._messages = _messages(result.observation, [])
        prompt = self.ctx.renderer.build_generation_prompt(self._messages)
        if prompt.length > self.ctx.max_context_tokens:
            await self._close()
            return InitialObservationOverflow.prompt_too_long(prompt.length, self.ctx.max_context_tokens)
        return prompt, self._stop

    async def step(self, action: list[int], *, extra: ActionExtra | None = None) -> StepResult:
        outside = tokens_outside_vocabulary(action, self.ctx.renderer.vocab_size)
        if outside is not None:  # never sent to the server: no sampler produces these ids
            await self._close()
            return StepResult.final(
                0.0, StopReason.PARSE_ERROR, self._prompt(), self._stop, logs={"error": outside}
            )
        reply = self.ctx.renderer.parse_response(list(action))
        text = str(reply.message["content"])
        try:
            if self._client is None:
                raise RuntimeError("no session: the episode is over or never started")
            result = await self._client.step({self.action_field: text})
        except Exception as exc:  # the server died, hung past the timeout, or refused the action
            await self._close()
            return StepResult.final(
                0.0,
                StopReason.ENV_ERROR,
                self._prompt(),
                self._stop,
                logs={"error": f"OpenEnv server {self.url}: {type(exc).__name__}: {exc}"[:500]},
            )
        self._messages = _messages(
            result.observation, [*self._messages, Message(role="assistant", content=text)]
        )
        reward = float(result.reward or 0.0)
        if not result.done:
            return StepResult(reward, False, self._prompt(), self._stop)
        await self._close()
        observation = result.observation if isinstance(result.observation, dict) else {}
        return StepResult.final(
            reward,
            _stop_reason(observation.get("stop_reason")),
            self._prompt(),
            self._stop,
            metrics=_numbers(observation.get("metrics")),
            logs={
                k: v
                for k, v in dict(observation.get("logs") or {}).items()
                if isinstance(v, str | int | float)
            },
        )

    def conversation(self) -> list[Message]:
        return list(self._messages)

    def _prompt(self) -> Observation:
        return self.ctx.renderer.build_generation_prompt(self._messages)

    async def _close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()


def _messages(observation: object, history: list[Message]) -> list[Message]:
    """The conversation after an observation: envsuite servers send it whole; others send a turn."""
    if isinstance(observation, dict) and isinstance(observation.get("messages"), list):
        return [Message(role=str(m["role"]), content=str(m["content"])) for m in observation["messages"]]
    if isinstance(observation, dict):
        text = next((observation[k] for k in TEXT_KEYS if isinstance(observation.get(k), str)), None)
        if text is None:
            text = json.dumps(observation, sort_keys=True, default=str)
    else:
        text = str(observation)
    return [*history, Message(role="user", content=text)]


def _stop_reason(value: object) -> StopReason:
    if not isinstance(value, str):
        return StopReason.COMPLETED
    try:
        return StopReason(value)
    except ValueError:
        return StopReason.COMPLETED


def _numbers(value: object) -> dict[str, float | int]:
    if not isinstance(value, dict):
        return {}
    return {
        str(k): float(v) for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }


def openenv_spec(env_id: str) -> EnvSpec:
    """The catalog spec of ``openenv:<url>`` (asked once per process and server)."""
    url = env_id.split(":", 1)[1].rstrip("/")
    # The leaderboard names every result by a versioned id; a scheme id has no versions, so its
    # results are stored as version 0 (`openenv:<url>-v0`), which means the same server.
    url = url.removesuffix("-v0")
    if url in _spec_cache:
        return _spec_cache[url]
    generic = EnvSpec(
        id=f"{SCHEME}:{url}",
        entry_point=OpenEnvEnv,
        kwargs={"url": url},
        kind=EnvKind.MULTI_TURN,
        tags=(SCHEME,),
    )
    try:
        document = _fetch_spec(url)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return dataclasses.replace(generic, unavailable=f"OpenEnv server {url} is not reachable: {exc}")
    if document is None:
        env_spec = dataclasses.replace(generic, description=f"OpenEnv server at {url}", max_turns=64)
    else:
        lo, hi = document.get("reward_range", (-1.0, 1.0))
        env_spec = dataclasses.replace(
            generic,
            kind=EnvKind(document.get("kind", EnvKind.MULTI_TURN.value)),
            description=f"{document.get('env_id')} served over OpenEnv at {url}",
            reward_range=(float(lo), float(hi)),
            max_turns=document.get("max_turns"),
        )
    _spec_cache[url] = env_spec
    return env_spec


def _fetch_spec(url: str) -> SpecDocument | None:
    """envsuite's spec document, or None for a server that is not envsuite's (no such route).

    The document is the server's word: a malformed one fails in :func:`openenv_spec` as it is read."""
    try:
        with urllib.request.urlopen(f"{url}/envsuite", timeout=10) as response:
            data = json.loads(response.read().decode())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return cast("SpecDocument", data) if isinstance(data, dict) else None
