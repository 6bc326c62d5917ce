"""Adapters from catalog envs to other APIs: gymnasium (``make``) and PettingZoo (multi-agent games).

Each adapter loads its library only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envsuite.wrappers.gymnasium import GymEnv, make
    from envsuite.wrappers.pettingzoo import aec_env, parallel_env

__all__ = [
    # gymnasium
    "GymEnv",
    "make",
    # pettingzoo
    "aec_env",
    "parallel_env",
]


def __getattr__(name: str) -> Any:
    if name in ("GymEnv", "make"):
        from envsuite.wrappers import gymnasium

        return getattr(gymnasium, name)
    if name in ("aec_env", "parallel_env"):
        from envsuite.wrappers import pettingzoo

        return getattr(pettingzoo, name)
    raise AttributeError(f"module 'envsuite.wrappers' has no attribute {name!r}")
