"""Stored text made safe to show on one line: control characters become visible escapes.

Model names, env ids and paths are data written by other programs. An ESC sequence in a model name
would recolour or clear a terminal, and a C0 control character makes an SVG or HTML file ill-formed
(XML 1.0 forbids them even when escaped). Every leaderboard view (terminal, page, chart; the JSON for
scripts keeps the raw value) shows stored text through :func:`display_text`: the core's
:func:`envsuite.display.printable`, plus newlines and tabs (a table cell or a chart label is one line)
and the XML non-characters U+FFFE/U+FFFF.
"""

from __future__ import annotations

import re

from envsuite.display import printable

_SINGLE_LINE = re.compile("[\n\t\ufffe\uffff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def display_text(text: object) -> str:
    """``text`` as a single printable line: unsafe characters replaced by ``\\xNN`` / ``\\uNNNN`` escapes."""
    return _SINGLE_LINE.sub(_escape, printable(str(text)))
