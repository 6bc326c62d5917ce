"""Role-asymmetric games for a policy per role: twenty questions with a learned answerer, bargaining, and
a cooperative referential game (see :mod:`envsuite.games._role_rules` and docs/games.md)."""

from envsuite.games._role_envs import BargainEnv, ReferentialEnv, TwentyQuestionsDuelEnv
from envsuite.games._role_rules import (
    ATTRIBUTES,
    SECRETS,
    Bargain,
    BargainFactory,
    Referential,
    ReferentialFactory,
    TwentyQuestionsDuel,
    TwentyQuestionsDuelFactory,
)

__all__ = [
    "ATTRIBUTES",
    "SECRETS",
    "Bargain",
    "BargainEnv",
    "BargainFactory",
    "Referential",
    "ReferentialEnv",
    "ReferentialFactory",
    "TwentyQuestionsDuel",
    "TwentyQuestionsDuelEnv",
    "TwentyQuestionsDuelFactory",
]
