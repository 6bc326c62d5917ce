"""Stored text made safe to show: control characters become visible escapes before any view sees them.

Model names, env ids and paths are data written by other programs. An ESC sequence in a model name
would recolour or clear a terminal, and a C0 control character makes an SVG or HTML file ill-formed
(XML 1.0 forbids them even when escaped). Every view (terminal, page, chart, JSON for scripts keeps
the raw value) passes displayed text through :func:`display_text`, so such characters appear as
``\\x1b``-style escapes: visible, unambiguous, and inert everywhere.
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, lone surrogates, the line/paragraph separators, bidi overrides and
# isolates (they reorder the text around them), and the XML non-characters U+FFFE/U+FFFF.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufffe\uffff\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def display_text(text: object) -> str:
    """``text`` as a single printable line: unsafe characters replaced by ``\\xNN`` / ``\\uNNNN`` escapes."""
    return _UNSAFE.sub(_escape, str(text))
