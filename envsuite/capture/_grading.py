"""Scoring a captured episode with a catalog env's own grader.

Each final choice's path through the episode is replayed into a fresh env of ``env_id`` at ``seed``:
the sampled tokens of every call, in order, are the env's actions, and the reward the env returns over
them is the score. That is the env's own grade when the agent played that env (an Inspect task, an
OpenEnv client or ``envsuite.make(..., mode="chat")`` driving the same seed); for a single-turn env it
grades the reply as an answer to the env's problem at that seed. Replies after the env ends are not
stepped; an episode that stops before the env ends keeps the reward earned so far.
"""

from __future__ import annotations

from typing import Any

from envsuite.capture._records import CapturedEpisode
from envsuite.core import Split, as_overflow


async def grade_episode(
    episode: CapturedEpisode,
    env_id: str,
    seed: int,
    *,
    split: Split = "train",
    env_kwargs: dict[str, Any] | None = None,
) -> list[float]:
    """One reward per choice of the episode's last call, from replaying it into ``env_id``."""
    from envsuite import make_env

    rewards = []
    for chain in episode.chains():
        env = make_env(
            env_id, seed=seed, split=split, model=episode.calls[0].base_model, **(env_kwargs or {})
        )
        start = await env.initial_observation()
        overflow = as_overflow(start)
        if overflow is not None:
            rewards.append(float(overflow.reward))
            continue
        total = 0.0
        for call, index in chain:
            step = await env.step(list(call.choices[index].tokens))
            total += step.reward
            if step.episode_done:
                break
        rewards.append(total)
    return rewards
