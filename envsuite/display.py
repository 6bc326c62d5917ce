"""Text made safe to show: model output and user-supplied names are data, never terminal commands.

A reply, an env description or a model label may hold control characters: an ESC sequence clears or
recolours a terminal, a carriage return or backspace hides what came before it, bidirectional overrides
reorder what is shown, and a lone surrogate cannot be written as UTF-8 at all. :func:`printable`
replaces every such character with a visible escape (``\\x1b``, ``\\u202e``), so what is shown is what
was there. Newlines and tabs are kept: they are layout, not commands.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 and C1 controls (newline and tab are kept), DEL
    "\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidirectional marks, embeddings, overrides, isolates
    "\u2028\u2029"  # line and paragraph separators (terminals and editors break lines on them)
    "\ud800-\udfff]"  # lone surrogates (a valid pair never appears in a Python str as two chars)
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with control, bidi-override and surrogate characters shown as escapes (``\\x1b``)."""
    return _UNSAFE.sub(_escape, text)


__all__ = ["printable"]
