"""Turning a reply written as text into the tokens a sampler would have produced for it."""

from __future__ import annotations

from envsuite.chat import StopCondition
from envsuite.renderers.base import Renderer


def reply_to_tokens(renderer: Renderer, text: str, stop: StopCondition | None = None) -> list[int]:
    """Tokens of ``text`` as a finished assistant turn: the text, then the first stop sequence.

    Used wherever a person or a script writes the reply (gym text mode, ``envsuite play``, the
    conformance checker), so the env sees exactly what a cleanly stopping sampler would send.
    """
    tokens = list(renderer.tokenizer.encode(text, add_special_tokens=False))
    stop = stop or renderer.get_stop_sequences()
    if stop and isinstance(stop[0], int):
        tokens.append(int(stop[0]))
    elif stop:
        tokens.extend(renderer.tokenizer.encode(str(stop[0]), add_special_tokens=False))
    return tokens
