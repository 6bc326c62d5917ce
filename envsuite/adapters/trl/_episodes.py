"""Multi-turn catalog envs through TRL's ``environment_factory`` (experimental in TRL 1.16).

TRL's route for turns after the first: an environment object whose public methods are tools the model
calls, ``reset(**row)`` (text appended to the prompt's last user message) and ``get_reward()`` (the
finished rollout's reward). :class:`EnvEpisode` is that object for a catalog env: ``reset`` starts the
row's episode (``env_seed``) and returns its opening; the one tool, ``act``, sends the model's move to
the env and returns the env's answer; ``get_reward`` is the episode's return. The env's turns reach the
model only as tool results, so each move is a tool call, and TRL parses tool calls only for the chat
templates it knows (``trl.chat_template_utils.add_response_schema``; not SmolLM2's): docs/interop.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from envsuite.catalog._make import (
    DEFAULT_MAX_CONTEXT_TOKENS,
    DEFAULT_MODEL,
    RendererConfig,
    make_env,
)
from envsuite.core import Env, Split, StopCondition, as_overflow
from envsuite.renderers import reply_to_tokens

if TYPE_CHECKING:
    from datasets import Dataset

from envsuite.adapters.trl._single_turn import SEED_COLUMN


class EnvEpisode:
    """One catalog-env episode at a time for TRL's tool loop (TRL pools instances and resets them)."""

    def __init__(
        self,
        env_id: str,
        *,
        env_kwargs: dict[str, object] | None = None,
        split: Split = "train",
        model: str = DEFAULT_MODEL,
        max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS,
    ) -> None:
        self._env_id, self._env_kwargs, self._split = env_id, dict(env_kwargs or {}), split
        self._renderer_config = RendererConfig(model)
        self._max_context_tokens = max_context_tokens
        self._env: Env | None = None
        self._stop: StopCondition = []
        self._return = 0.0
        self._done = True

    def reset(self, env_seed: int, **_: object) -> str:
        """Start the row's episode; its opening goes into the prompt's last user message."""
        self._env = make_env(
            self._env_id,
            seed=int(env_seed),
            split=self._split,
            model=None,  # the renderer config names the model
            renderer=self._renderer_config,
            max_context_tokens=self._max_context_tokens,
            **self._env_kwargs,
        )
        start = asyncio.run(self._env.initial_observation())
        overflow = as_overflow(start)
        self._return, self._done = 0.0, overflow is not None
        if overflow is not None:
            self._return = float(overflow.reward)
            return "(the episode's opening exceeds the token budget)"
        _observation, self._stop = start  # type: ignore[misc]  # not an overflow
        return _turns_text(self._env)

    def act(self, move: str) -> str:
        """Make your move in the episode (one turn: a question, a guess, an answer or a game move).

        Args:
            move: What you say or play this turn, as you would write it in a reply.

        Returns:
            The environment's answer, or the final outcome when the episode is over.
        """
        if self._env is None or self._done:
            return "The episode is over."
        before = len(self._env.conversation())
        result = asyncio.run(self._env.step(reply_to_tokens(self._renderer_config.build(), move, self._stop)))
        self._return += float(result.reward)
        self._done = result.episode_done
        if result.episode_done:
            return f"The episode is over. Your total reward: {self._return:g}."
        self._stop = result.next_stop_condition
        return _turns_text(self._env, after=before + 1)  # the env's turns after the move

    def get_reward(self) -> float:
        """The episode's return (the sum of its step rewards); TRL logs it under ``EnvEpisode``."""
        return self._return


def _turns_text(env: Env, after: int = 0) -> str:
    return "\n\n".join(str(m["content"]) for m in env.conversation()[after:] if m["role"] != "assistant")


def environment_factory(env_id: str, **settings: object) -> Callable[[], EnvEpisode]:
    """TRL's ``environment_factory`` for ``env_id`` (``settings``: :class:`EnvEpisode`'s keywords)."""
    return lambda: EnvEpisode(env_id, **settings)  # type: ignore[arg-type]


def episode_dataset(n: int, *, first_seed: int = 0) -> Dataset:
    """``n`` episodes as TRL rows: an empty user turn (``reset`` fills it) and the ``env_seed``."""
    from datasets import Dataset

    seeds = list(range(first_seed, first_seed + n))
    return Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": ""}] for _ in seeds], SEED_COLUMN: seeds}
    )
