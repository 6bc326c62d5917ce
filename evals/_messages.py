"""Converting between envsuite chat messages and Inspect's ChatMessage objects."""

from __future__ import annotations

from collections.abc import Sequence

from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
)

from envsuite.core import Message


def to_envsuite(messages: Sequence[ChatMessage]) -> list[Message]:
    """Inspect messages as envsuite messages (text only; tool results become user turns)."""
    converted: list[Message] = []
    for message in messages:
        role = message.role if message.role in ("system", "user", "assistant") else "user"
        converted.append({"role": role, "content": message.text})
    return converted


def to_inspect(messages: Sequence[Message]) -> list[ChatMessage]:
    """envsuite messages as Inspect messages, for solvers and transcripts."""
    converted: list[ChatMessage] = []
    for message in messages:
        role, content = message["role"], message["content"]
        if role == "system":
            converted.append(ChatMessageSystem(content=content))
        elif role == "assistant":
            converted.append(ChatMessageAssistant(content=content))
        elif role == "tool":
            converted.append(ChatMessageTool(content=content))
        else:
            converted.append(ChatMessageUser(content=content))
    return converted
