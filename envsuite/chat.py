"""Chat data shared by the env contracts (``envsuite.core``) and the renderers (``envsuite.renderers``).

It sits below both, so renderers never import the env contracts and the contracts never import a
renderer at run time. ``envsuite.core`` re-exports every name here.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypeAlias, TypedDict

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]


class Message(TypedDict):
    """One chat message. ``thinking`` holds reasoning text for renderers that keep it separately."""

    role: Role
    content: str
    thinking: NotRequired[str]


StopCondition: TypeAlias = list[str] | list[int]
"""Where the policy must stop sampling: stop strings or stop token ids (never mixed)."""

__all__ = ["Message", "Role", "StopCondition"]
