"""Chat data shared by the env contracts (``envsuite.core``) and the renderers (``envsuite.renderers``).

It sits below both, so renderers never import the env contracts and the contracts never import a
renderer at run time. ``envsuite.core`` re-exports every name here.
"""

from __future__ import annotations

from typing import NotRequired, TypeAlias, TypedDict

Role: TypeAlias = str
"""Who speaks: usually ``system``, ``user``, ``assistant`` or ``tool``. As in tinker-cookbook, any
other speaker name (``player``, ``answerer``) is allowed and renders under its own name; only
``assistant`` turns are the policy's (trained, and closed by the stop sequence)."""

STANDARD_ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")


class Message(TypedDict):
    """One chat message. ``thinking`` holds reasoning text for renderers that keep it separately."""

    role: Role
    content: str
    thinking: NotRequired[str]


StopCondition: TypeAlias = list[str] | list[int]
"""Where the policy must stop sampling: stop strings or stop token ids (never mixed)."""

__all__ = ["STANDARD_ROLES", "Message", "Role", "StopCondition"]
