"""Reading moves out of free-form text: the last ``[...]`` of a reply, and move lists in observations."""

from __future__ import annotations

import re

MAX_MOVE_CHARS = 200
"""Longer bracket contents are not moves (a runaway reply); they are clipped to this length."""

_BRACKET = re.compile(r"\[([^\[\]\n]{1,200})\]")
_MOVE_LIST_HEADER = re.compile(r"(available|valid|legal|possible)[^\n:]{0,40}:", re.IGNORECASE)


def last_bracketed(text: str) -> str | None:
    """The last ``[...]`` in ``text`` (brackets included, inner whitespace trimmed), or None."""
    found = _BRACKET.findall(text)
    if not found:
        return None
    return f"[{found[-1].strip()}]"


def bracket_action(reply: str) -> str:
    """TextArena's action form for a reply: its last ``[...]``, else the whole (clipped) reply bracketed.

    Text outside the brackets is tolerated and dropped; a reply with no brackets is passed on the way
    TextArena's own action formatting does, so the game judges it (usually an invalid move).
    """
    found = last_bracketed(reply)
    if found is not None:
        return found
    return f"[{reply.strip()[:MAX_MOVE_CHARS]}]"


def listed_moves(text: str) -> list[str] | None:
    """Moves an observation lists after its last "Available/Valid/Legal moves:" header, or None.

    Only bracketed items on the header's line and the lines right after it (up to a blank line)
    count, so example moves elsewhere in the prompt are not mistaken for legal ones.
    """
    headers = list(_MOVE_LIST_HEADER.finditer(text))
    if not headers:
        return None
    tail = text[headers[-1].end() :]
    block = tail.split("\n\n", 1)[0]
    moves = [f"[{m.strip()}]" for m in _BRACKET.findall(block)]
    unique = list(dict.fromkeys(moves))
    return unique or None
