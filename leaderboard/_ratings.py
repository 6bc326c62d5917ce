"""openskill ratings replayed from matches: the same matches always give the same table.

The store calls :func:`compute_ratings` whenever matches are added, so stored ratings stay current.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from envsuite.leaderboard._records import MatchResult, Rating

if TYPE_CHECKING:
    from openskill.models import PlackettLuce, PlackettLuceRating

ALL_GAMES = "*"
"""The pool that rates every match together, whatever the env."""


def _model() -> PlackettLuce:
    # PlackettLuce handles any number of players and draws (equal ranks); its defaults are
    # mu=25, sigma=25/3, so ordinal = mu - 3*sigma starts at 0.
    from openskill.models import PlackettLuce

    return PlackettLuce()


def compute_ratings(matches: Sequence[MatchResult]) -> list[Rating]:
    """Replay ``matches`` in (``played_at``, ``match_id``) order, per env and over all games.

    Each player is a team of one. The input order does not matter: sorting first makes the result a
    function of the set of matches.
    """
    model = _model()
    ordered = sorted(matches, key=lambda m: (m.played_at, m.match_id))
    pools: dict[str, dict[str, PlackettLuceRating]] = {}
    counts: dict[tuple[str, str], int] = {}
    for match in ordered:
        for pool in (match.env_id, ALL_GAMES):
            table = pools.setdefault(pool, {})
            teams = [[table.get(p) or model.rating(name=p)] for p in match.players]
            updated = model.rate(teams, ranks=[float(r) for r in match.ranks])
            for player, team in zip(match.players, updated, strict=True):
                table[player] = team[0]
                counts[(pool, player)] = counts.get((pool, player), 0) + 1
    ratings = [
        Rating(pool, player, float(r.mu), float(r.sigma), float(r.ordinal()), counts[(pool, player)])
        for pool, table in pools.items()
        for player, r in table.items()
    ]
    return sorted(ratings, key=lambda r: (r.pool, -r.ordinal, r.player))
