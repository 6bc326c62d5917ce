"""Adapters between catalog envs and other APIs, each loading its library only when used.

* gymnasium: :func:`make` / :class:`GymEnv` (``envsuite.adapters.gymnasium``);
* PettingZoo: :func:`aec_env` / :func:`parallel_env` for turn-based games (``envsuite.adapters.pettingzoo``);
* tinker-cookbook, both ways: ``envsuite.adapters.cookbook``;
* reasoning-gym datasets as ``reasoning_gym/<name>`` envs: ``envsuite.adapters.reasoning_gym``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envsuite.adapters.gymnasium import GymEnv, make
    from envsuite.adapters.pettingzoo import aec_env, parallel_env

__all__ = [
    # gymnasium
    "GymEnv",
    "make",
    # pettingzoo
    "aec_env",
    "parallel_env",
]


def __getattr__(name: str) -> object:
    if name in ("GymEnv", "make"):
        from envsuite.adapters import gymnasium

        return getattr(gymnasium, name)
    if name in ("aec_env", "parallel_env"):
        from envsuite.adapters import pettingzoo

        return getattr(pettingzoo, name)
    raise AttributeError(f"module 'envsuite.adapters' has no attribute {name!r}")
