"""Catalog envs in TRL's ``GRPOTrainer`` (``envsuite.adapters.trl``).

* :class:`EnvTask` names a single-turn catalog env (its arguments, split and tokenizer);
* :func:`trl_dataset` gives TRL's ``train_dataset`` (``prompt``: the env's first observation as text,
  ``env_seed``: its episode);
* :class:`EnvReward` is the ``reward_funcs`` entry: each completion's token ids graded by a fresh env
  of its row's seed, so TRL logs the env's own rewards;
* multi-turn envs through TRL's (experimental) ``environment_factory``: :func:`environment_factory`
  gives :class:`EnvEpisode` objects (``reset`` / the ``act`` tool / ``get_reward``), with
  :func:`episode_dataset` as their rows; TRL runs its tool loop only for chat templates it knows.

Needs the ``envsuite[trl]`` extra. docs/interop.md ("TRL") has the recipe, on CPU and on GPUs with vLLM,
and what TRL's API allows for multi-turn and tool-use envs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envsuite.adapters.trl._episodes import EnvEpisode, environment_factory, episode_dataset
    from envsuite.adapters.trl._single_turn import SEED_COLUMN, EnvReward, EnvTask, trl_dataset

__all__ = [
    # single-turn envs: prompt dataset + reward function
    "SEED_COLUMN",
    "EnvReward",
    "EnvTask",
    "trl_dataset",
    # multi-turn envs: TRL's environment_factory
    "EnvEpisode",
    "environment_factory",
    "episode_dataset",
]

_EPISODES = ("EnvEpisode", "environment_factory", "episode_dataset")


def __getattr__(name: str) -> object:
    # datasets (and TRL's users' torch) load only when the bridge is used.
    if name in _EPISODES:
        from envsuite.adapters.trl import _episodes

        return getattr(_episodes, name)
    if name in __all__:
        from envsuite.adapters.trl import _single_turn

        return getattr(_single_turn, name)
    raise AttributeError(f"module 'envsuite.adapters.trl' has no attribute {name!r}")
