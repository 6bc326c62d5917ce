"""What the probe learned about each textarena game on this machine (the data lives in ``_table.py``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GameRecord:
    """One textarena base game (``<name>-v0``) as probed here."""

    name: str
    """textarena's id without ``-v0`` (``TicTacToe``)."""
    num_players: int
    """The smallest player count the game accepts (0 when it did not get that far)."""
    bracket_actions: bool
    """textarena formats actions as ``[...]`` for this game (its default wrappers do)."""
    numpy_rng: bool
    """The game also draws from ``numpy.random``'s global state."""
    word_game: bool
    """The game needs the offline nltk stand-in."""
    unavailable: str | None
    """Why the game cannot run here (None when it ran)."""

    @property
    def env_id(self) -> str:
        return f"textarena/{self.name}-v0"
