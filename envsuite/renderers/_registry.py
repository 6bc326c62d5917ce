"""Renderer names -> implementations, imported only when a renderer is asked for."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping

from envsuite.errors import UsageError
from envsuite.renderers.base import Renderer, Tokenizer


def _no_options(name: str, options: Mapping[str, object]) -> None:
    if options:
        raise ValueError(f"renderer {name!r} takes no options, got {sorted(options)}")


def _chatml(tokenizer: Tokenizer, options: Mapping[str, object]) -> Renderer:
    from envsuite.renderers._chatml import ChatMLRenderer

    _no_options("chatml", options)
    return ChatMLRenderer(tokenizer)


def _chatml_smollm2(tokenizer: Tokenizer, options: Mapping[str, object]) -> Renderer:
    from envsuite.renderers._chatml import SmolLM2ChatMLRenderer

    _no_options("chatml-smollm2", options)
    return SmolLM2ChatMLRenderer(tokenizer)


def _qwen3(tokenizer: Tokenizer, options: Mapping[str, object]) -> Renderer:
    from envsuite.renderers._qwen3 import Qwen3Renderer

    unknown = set(options) - {"strip_thinking_from_history"}
    if unknown:
        raise ValueError(f"renderer 'qwen3' takes only strip_thinking_from_history, got {sorted(unknown)}")
    strip = options.get("strip_thinking_from_history", True)
    if not isinstance(strip, bool):
        raise TypeError(f"strip_thinking_from_history must be a bool, got {strip!r}")
    return Qwen3Renderer(tokenizer, strip_thinking_from_history=strip)


def _llama3(tokenizer: Tokenizer, options: Mapping[str, object]) -> Renderer:
    from envsuite.renderers._llama3 import Llama3Renderer

    _no_options("llama3", options)
    return Llama3Renderer(tokenizer)


def _role_colon(tokenizer: Tokenizer, options: Mapping[str, object]) -> Renderer:
    from envsuite.renderers._role_colon import RoleColonRenderer

    _no_options("role_colon", options)
    return RoleColonRenderer(tokenizer)


_RENDERERS: dict[str, Callable[[Tokenizer, Mapping[str, object]], Renderer]] = {
    "chatml": _chatml,
    "chatml-smollm2": _chatml_smollm2,
    "qwen3": _qwen3,
    "llama3": _llama3,
    "role_colon": _role_colon,
}


def list_renderers() -> list[str]:
    """Names accepted by :func:`get_renderer`, sorted."""
    return sorted(_RENDERERS)


def get_renderer(name: str, tokenizer: Tokenizer, **options: object) -> Renderer:
    """Build the renderer called ``name`` for ``tokenizer``.

    Options: ``qwen3`` takes ``strip_thinking_from_history`` (bool, default True); the others take none.
    Raises ValueError for an unknown name (listing the known ones and close matches) or option.
    """
    build = _RENDERERS.get(name)
    if build is None:
        close = difflib.get_close_matches(str(name), list(_RENDERERS), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise UsageError(f"unknown renderer {name!r}; known renderers: {', '.join(list_renderers())}.{hint}")
    return build(tokenizer, options)
