"""The TextArena adapter: every textarena game that runs here, as ``textarena/<Game>-v0``.

Games run offline (a stand-in nltk corpus for the word games), with per-game random state isolated
from Python's global ``random`` and from each other, behind the :class:`envsuite.turn_games.TurnGame`
protocol. ``TextArenaEnv`` is the single-seat catalog env; the multi-agent builders take a
``TextArenaFactory``.
"""

from envsuite.games.textarena._env import TextArenaEnv
from envsuite.games.textarena._game import TextArenaFactory, TextArenaGame
from envsuite.games.textarena._offline import ensure_offline_nltk, nltk_data_dir
from envsuite.games.textarena._probe import probe_game
from envsuite.games.textarena._records import GameRecord
from envsuite.games.textarena._rng import IsolatedRandom
from envsuite.games.textarena._table import all_games, available_games, record

__all__ = [
    # envs and games
    "TextArenaEnv",
    "TextArenaFactory",
    "TextArenaGame",
    # the probed table
    "GameRecord",
    "all_games",
    "available_games",
    "probe_game",
    "record",
    # offline data and randomness
    "IsolatedRandom",
    "ensure_offline_nltk",
    "nltk_data_dir",
]
