"""Turning a reply written as text into the tokens a sampler would have produced for it."""

from __future__ import annotations

from envsuite.chat import Message, StopCondition
from envsuite.renderers.base import Renderer


def encodable_text(text: str) -> str:
    """``text`` with every lone surrogate (``"\\ud800"``) replaced by U+FFFD.

    A Python ``str`` may hold surrogate code points that no UTF-8 text can (they arrive from
    ``surrogateescape``-decoded input, JSON ``"\\ud800"`` escapes or careless slicing); tokenizers
    reject them with a ``TypeError``. A surrogate *pair* written as two code points is joined into the
    character it stands for; an unpaired one becomes the replacement character, which is what a
    byte-level sampler emits for bytes that are not UTF-8. So any ``str`` is a defined reply.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def reply_to_tokens(renderer: Renderer, text: str, stop: StopCondition | None = None) -> list[int]:
    """Tokens of ``text`` as a finished assistant turn: the text, then the first stop sequence.

    Used wherever a person or a script writes the reply (gym text mode, ``envsuite play``, the
    conformance checker), so the env sees exactly what a cleanly stopping sampler would send.
    Lone surrogates in ``text`` become U+FFFD (see :func:`encodable_text`) instead of raising.
    """
    tokens = list(renderer.tokenizer.encode(encodable_text(text), add_special_tokens=False))
    stop = stop or renderer.get_stop_sequences()
    if stop and isinstance(stop[0], int):
        tokens.append(int(stop[0]))
    elif stop:
        tokens.extend(renderer.tokenizer.encode(encodable_text(str(stop[0])), add_special_tokens=False))
    return tokens


def reply_message_tokens(renderer: Renderer, message: Message) -> list[int]:
    """Tokens of an assistant ``message`` as a cleanly stopping sampler would produce them: its content
    and tool calls written in the renderer's format, then the end of turn.

    For drivers whose policy answers with a message rather than tokens (an Inspect model's tool calls,
    a scripted policy); the env then parses back what the message says.
    """
    if message.get("role") != "assistant":
        raise ValueError(f"reply_message_tokens takes an assistant message, got role {message.get('role')!r}")
    example = renderer.build_supervised_example([{"role": "user", "content": "."}, message])
    tokens = example.model_input.to_ints()
    trained = [i for i, weight in enumerate(example.weights_T) if weight]
    return tokens[trained[0] :] if trained else []


def reply_message_text(renderer: Renderer, message: Message) -> str:
    """The text of an assistant ``message`` as the renderer writes it, up to (not including) its end of
    turn: what a scripted policy (an env's reward probes) replies to make that message."""
    tokens = reply_message_tokens(renderer, message)
    stop = renderer.get_stop_sequences()
    if stop and isinstance(stop[0], int):
        end = next((i for i, t in enumerate(tokens) if t in stop), len(tokens))
        return renderer.tokenizer.decode(tokens[:end])
    text = renderer.tokenizer.decode(tokens)
    cuts = [text.find(str(s)) for s in stop if str(s) in text]
    return text[: min(cuts)] if cuts else text
