"""The one error shape for SDK calls the local backend cannot serve (each is listed in docs/backend.md)."""

from __future__ import annotations

NOT_LOCAL = "{method}: not available on the local backend: {reason}"


def not_local(method: str, reason: str) -> NotImplementedError:
    """``NotImplementedError`` naming the SDK method and why it cannot work locally."""
    return NotImplementedError(NOT_LOCAL.format(method=method, reason=reason))
