"""Any catalog env as a verifiers (0.4) environment: a ``Taskset`` of seeded episodes and a ``Harness``.

verifiers 0.4 splits an environment into a taskset (data and ``@reward`` grading) and a harness (the
program that talks to the model, every model call going through verifiers' interception server, which
records the trace). :class:`EnvsuiteTaskset` yields one task per seed; :class:`EnvsuiteHarness` plays
the episode in process (verifiers allows a harness loop in process as long as its model calls go
through the interception endpoint): it sends the env's conversation as chat messages, steps the env
with each reply, and sends the env's next turn, for single-turn and multi-turn envs alike.

The reward never trusts the harness: :meth:`EnvsuiteTask.reward` replays the trace's assistant
messages, in order, through a fresh env of the task's seed and returns the episode's return (the sum
of its step rewards), so any harness that leaves the assistant turns in the trace is graded the same
(the built-in ``null`` chat loop too, for single-turn envs).

A verifiers taskset id is an importable module that exports one ``Taskset`` and (optionally) one
``Harness`` subclass in ``__all__``; :func:`write_environment_package` writes such a package for a
catalog env (``vf-eval <its name>`` then runs it; ``pip install -e`` makes it a verifiers environment
prime-rl can take).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.runtimes import ProgramResult

from envsuite.catalog._make import (
    DEFAULT_MAX_CONTEXT_TOKENS,
    DEFAULT_MODEL,
    RendererConfig,
    available_spec,
    make_env,
)
from envsuite.core import Env, Split, as_overflow
from envsuite.renderers import reply_to_tokens

INFO_KEY = "envsuite"
"""Where :class:`EnvsuiteHarness` leaves its own account of the episode in ``Trace.info``."""


class EnvsuiteData(vf.TaskData):
    """One episode of a catalog env: the env, its arguments and the seed that picks the episode."""

    env_id: str
    seed: int
    split: str = "train"
    model: str = DEFAULT_MODEL
    """The tokenizer the env renders for (replies are tokenized with it before the env sees them)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS


def episode_env(data: EnvsuiteData) -> Env:
    """A fresh single-use env playing ``data``'s episode."""
    split: Split = "test" if data.split == "test" else "train"
    return make_env(
        data.env_id,
        seed=data.seed,
        split=split,
        model=None,  # the renderer config names the model
        renderer=RendererConfig(data.model),
        max_context_tokens=data.max_context_tokens,
        **data.env_kwargs,
    )


async def replay_return(data: EnvsuiteData, replies: list[str]) -> float:
    """The return of ``data``'s episode when the policy's turns are ``replies``, in order."""
    env = episode_env(data)
    start = await env.initial_observation()
    overflow = as_overflow(start)
    if overflow is not None:
        return float(overflow.reward)
    _observation, stop = start  # type: ignore[misc]  # not an overflow, so the (observation, stop) pair
    renderer = RendererConfig(data.model).build()
    total = 0.0
    for reply in replies:
        result = await env.step(reply_to_tokens(renderer, reply, stop))
        total += float(result.reward)
        if result.episode_done:
            break
        stop = result.next_stop_condition
    return total


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: the text ones, joined
        return "".join(str(getattr(part, "text", "") or "") for part in content)
    return ""


class EnvsuiteTask(vf.Task[EnvsuiteData]):
    """One catalog-env episode; graded by replaying the trace's assistant turns through the env."""

    @vf.reward(weight=1.0)
    async def reward(self, trace: vf.Trace) -> float:
        replies = [_text(m.content) for m in trace.messages if m.role == "assistant"]
        return await replay_return(self.data, replies)


class EnvsuiteTasksetConfig(vf.TasksetConfig):
    """Which catalog env and which episodes: ``--env.taskset.env-id``, ``--env.taskset.num-tasks`` ..."""

    env_id: str = ""
    """The catalog id (``envsuite list``)."""
    num_tasks: int = 5
    first_seed: int = 0
    """Task ``i`` plays the episode of seed ``first_seed + i``."""
    split: str = "train"
    model: str = DEFAULT_MODEL
    env_kwargs: dict[str, Any] = Field(default_factory=dict)


class EnvsuiteTaskset(vf.Taskset[EnvsuiteTask, EnvsuiteTasksetConfig]):
    """``num_tasks`` seeded episodes of a catalog env; each task's prompt is the episode's opening."""

    def load(self) -> Iterator[EnvsuiteTask]:
        config = self.config
        if not config.env_id:
            raise ValueError("which catalog env? set --env.taskset.env-id (envsuite list shows the ids)")
        env_spec = available_spec(config.env_id)
        for seed in range(config.first_seed, config.first_seed + config.num_tasks):
            data = EnvsuiteData(
                id=f"{env_spec.id}/{seed}",
                prompt="",  # replaced by the episode's opening below
                name=f"{env_spec.id} seed {seed}",
                env_id=config.env_id,
                seed=seed,
                split=config.split,
                model=config.model,
                env_kwargs=dict(config.env_kwargs),
            )
            yield EnvsuiteTask(data.model_copy(update={"prompt": _opening(data)}), config.task)


def _opening(data: EnvsuiteData) -> list[Any]:
    """The episode's first observation as chat messages (the task's prompt, shown in traces).

    ``load`` is synchronous but may be called under verifiers' running event loop, so the env's
    coroutine runs on a thread of its own.
    """

    async def opening() -> list[Any]:
        env = episode_env(data)
        if as_overflow(await env.initial_observation()) is not None:
            raise ValueError(f"{data.env_id} seed {data.seed}: the prompt exceeds its token budget")
        return _chat(env)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, opening()).result()


class EnvsuiteHarnessConfig(vf.HarnessConfig):
    """The in-process episode loop has no knobs beyond verifiers' own."""


class EnvsuiteHarness(vf.Harness[EnvsuiteHarnessConfig]):
    """Plays an :class:`EnvsuiteTaskset` episode in process: model calls via the interception endpoint."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False  # the model's replies go to the env, never to a shell
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        tool_interception_url: str | None = None,
    ) -> ProgramResult:
        from openai import AsyncOpenAI

        episode = EnvsuiteData.model_validate(trace.task.data.model_dump())
        env = episode_env(episode)
        start = await env.initial_observation()
        if as_overflow(start) is not None:
            return ProgramResult(
                exit_code=1, stdout="", stderr="the episode's prompt exceeds its token budget"
            )
        _observation, stop = start  # type: ignore[misc]  # not an overflow
        renderer = RendererConfig(episode.model).build()
        client = AsyncOpenAI(base_url=endpoint, api_key=secret)
        total, turns, done = 0.0, 0, False
        while not done:
            response = await client.chat.completions.create(model=ctx.model, messages=_chat(env))
            reply = response.choices[0].message.content or ""
            result = await env.step(reply_to_tokens(renderer, reply, stop))
            total, turns, done = total + float(result.reward), turns + 1, result.episode_done
            stop = result.next_stop_condition
        trace.info[INFO_KEY] = {"seed": episode.seed, "return": total, "turns": turns}
        return ProgramResult(exit_code=0, stdout="", stderr="")


def _chat(env: Env) -> list[Any]:
    """The env's conversation as OpenAI chat messages (a named speaker is a user turn)."""
    messages: list[Any] = []
    for message in env.conversation():
        role = str(message["role"])
        role = role if role in ("system", "user", "assistant") else "user"
        messages.append({"role": role, "content": str(message["content"])})
    return messages


_PACKAGE_INIT = '''"""{env_id} from the envsuite catalog as a verifiers environment (written by envsuite)."""

import verifiers.v1 as vf

from envsuite.adapters.verifiers import EnvsuiteHarness, EnvsuiteTask, EnvsuiteTaskset, EnvsuiteTasksetConfig


class {prefix}Config(EnvsuiteTasksetConfig):
    env_id: str = {env_id!r}


# verifiers reads the config class from the Taskset[...] base (the most derived one wins).
class {prefix}Taskset(EnvsuiteTaskset, vf.Taskset[EnvsuiteTask, {prefix}Config]):
    pass


__all__ = ["EnvsuiteHarness", "{prefix}Taskset"]
'''


def write_environment_package(env_id: str, directory: Path | str, *, name: str | None = None) -> Path:
    """Write a verifiers environment package for ``env_id`` under ``directory``; returns the package dir.

    The package (``envsuite_<id>`` unless ``name`` is given) is importable from ``directory`` (add it to
    ``PYTHONPATH``) or installable with ``pip install -e directory/<name>``; ``vf-eval <name>`` runs it.
    """
    available_spec(env_id)  # an unknown id fails here, with the catalog's suggestion
    module = name or "envsuite_" + re.sub(r"[^0-9a-zA-Z]+", "_", env_id).strip("_").lower()
    prefix = "".join(part.capitalize() for part in module.split("_"))
    root = Path(directory) / module
    (root / module).mkdir(parents=True, exist_ok=True)
    (root / module / "__init__.py").write_text(_PACKAGE_INIT.format(env_id=env_id, prefix=prefix))
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "{module.replace("_", "-")}"\nversion = "0.1.0"\n'
        f'dependencies = ["envsuite[verifiers]"]\n\n[build-system]\nrequires = ["hatchling"]\n'
        f'build-backend = "hatchling.build"\n\n[tool.hatch.build.targets.wheel]\npackages = ["{module}"]\n'
    )
    return root
