"""Single-turn catalog envs in TRL's ``GRPOTrainer``: a prompt dataset and a reward function.

TRL samples the completions itself (its own ``generate``, or vLLM in colocate or server mode) from the
``prompt`` column, then calls each reward function with the completions' token ids and the row's
other columns. :func:`trl_dataset` writes each episode's prompt as the exact text of the env's first
observation (checked to re-tokenize to the same ids, so TRL's model sees the prompt envsuite's trainer
would) and its seed; :class:`EnvReward` replays every completion's token ids through a fresh env of
that seed, so the reward TRL logs is the env's own reward for those tokens (no re-tokenization of the
reply: the ids go to ``Env.step`` as sampled).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envsuite.catalog._make import (
    DEFAULT_MAX_CONTEXT_TOKENS,
    DEFAULT_MODEL,
    RendererConfig,
    available_spec,
    make_env,
)
from envsuite.core import Env, Split, as_overflow
from envsuite.errors import UsageError
from envsuite.registration import EnvKind

if TYPE_CHECKING:
    from datasets import Dataset

SEED_COLUMN = "env_seed"
"""The dataset column that carries each row's episode seed to :class:`EnvReward`."""


@dataclass(frozen=True)
class EnvTask:
    """Which episodes TRL trains on: a single-turn catalog env, its arguments, split and tokenizer."""

    env_id: str
    env_kwargs: dict[str, object] = field(default_factory=dict)
    split: Split = "train"
    model: str = DEFAULT_MODEL
    """The model whose renderer writes the prompts; TRL's model must use the same tokenizer."""
    max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS

    def __post_init__(self) -> None:
        kind = available_spec(self.env_id).kind
        if kind is not EnvKind.SINGLE_TURN:
            # A later turn would need the env's reply in the conversation, which a reward function
            # (called once, after generation) cannot give: TRL's multi-turn route is environment_factory.
            raise UsageError(
                f"{self.env_id!r} is a {kind.value} env; TRL's prompt + reward_funcs route takes single-turn "
                "envs only (docs/interop.md, 'TRL': what TRL's API allows for multi-turn envs)"
            )

    async def prompt_ids(self, seed: int) -> list[int]:
        """The token ids of episode ``seed``'s first observation."""
        start = await self._env(seed).initial_observation()
        if as_overflow(start) is not None:
            raise UsageError(
                f"{self.env_id} seed {seed}: the prompt exceeds {self.max_context_tokens} tokens"
            )
        observation, _stop = start  # type: ignore[misc]  # not an overflow, so the (observation, stop) pair
        return list(observation.to_ints())

    async def reward(self, seed: int, completion_ids: list[int]) -> float:
        """The env's reward for ``completion_ids`` as the reply to episode ``seed``."""
        env = self._env(seed)
        await env.initial_observation()
        result = await env.step([int(t) for t in completion_ids])
        return float(result.reward)

    def _env(self, seed: int) -> Env:
        return make_env(
            self.env_id,
            seed=seed,
            split=self.split,
            model=None,  # the renderer config names the model
            renderer=RendererConfig(self.model),
            max_context_tokens=self.max_context_tokens,
            **self.env_kwargs,
        )


def trl_dataset(task: EnvTask, n: int, *, first_seed: int = 0) -> Dataset:
    """``n`` episodes (seeds ``first_seed ..``) as a TRL prompt dataset: columns ``prompt``, ``env_seed``."""
    from datasets import Dataset

    from envsuite.models import get_tokenizer

    tokenizer = get_tokenizer(task.model)
    seeds = list(range(first_seed, first_seed + n))
    prompts: list[str] = []
    for seed in seeds:
        ids = asyncio.run(task.prompt_ids(seed))
        text = str(tokenizer.decode(ids))
        # TRL tokenizes the text again; a prompt that does not come back as the same ids would train
        # on a different prompt than the env graded.
        if list(tokenizer(text, add_special_tokens=False)["input_ids"]) != ids:
            raise UsageError(f"{task.env_id} seed {seed}: the prompt text does not re-tokenize to its ids")
        prompts.append(text)
    return Dataset.from_dict({"prompt": prompts, SEED_COLUMN: seeds})


class EnvReward:
    """A TRL reward function: each completion's env reward, from a fresh env of its row's seed.

    TRL calls it with ``completion_ids`` (one list per completion) and the dataset's columns, of which
    it reads ``env_seed``; it logs the result under ``rewards/<__name__>/mean``.
    """

    def __init__(self, task: EnvTask) -> None:
        self.task = task
        self.__name__ = f"envsuite_{task.env_id}"  # TRL names the reward column after it

    def __call__(
        self, *, completion_ids: list[list[int]], env_seed: list[int], **_: object
    ) -> list[float | None]:
        async def all_rewards() -> list[float | None]:
            pairs = zip(env_seed, completion_ids, strict=True)
            return list(await asyncio.gather(*(self.task.reward(int(s), ids) for s, ids in pairs)))

        # TRL calls a sync reward function on its own thread, with no event loop running there.
        return asyncio.run(all_rewards())
