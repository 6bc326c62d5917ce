"""Adapters from catalog envs to other APIs: gymnasium (``make``) and PettingZoo (multi-agent games).

Each adapter loads its library only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envsuite.wrappers.gymnasium import GymEnv, make

__all__ = [
    # gymnasium
    "GymEnv",
    "make",
]


def __getattr__(name: str) -> Any:
    if name in ("GymEnv", "make"):
        from envsuite.wrappers import gymnasium

        return getattr(gymnasium, name)
    raise AttributeError(f"module 'envsuite.wrappers' has no attribute {name!r}")
