"""Chess as a project-owned game on python-chess (textarena's chess needs Python 3.12): ``chess-v0``."""

from envsuite.games.chess._env import ChessEnv
from envsuite.games.chess._rules import ChessFactory, ChessGame, parse_move, uci_vocabulary

__all__ = ["ChessEnv", "ChessFactory", "ChessGame", "parse_move", "uci_vocabulary"]
