"""The catalog envs of the role-asymmetric games: one seat (``seat``) is the trained policy, the other an
opponent (``"minimax"``, the default, is the scripted player of each game's ``best_moves``; a
MessageCompleter makes it a model). A policy per role trains each seat from its own view: the seat env's
reward is that seat's reward, and the PettingZoo wrappers (``game_factory``) give every seat its own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from envsuite.core import EnvContext, MessageCompleter, ProbeExpectation, RewardProbe
from envsuite.games._role_rules import (
    BARGAIN_ROUNDS,
    CANDIDATES,
    MAX_QUESTIONS,
    BargainFactory,
    ReferentialFactory,
    TwentyQuestionsDuelFactory,
)
from envsuite.games.multiagent._coordinator import DEFAULT_OPPONENT_TIMEOUT
from envsuite.games.multiagent._seat_env import DEFAULT_MAX_TURNS, SeatEnv, coordinator_against
from envsuite.turn_games import GameFactory, int_setting

_BELOW = ProbeExpectation.BELOW_REFERENCE


class _RoleEnv(SeatEnv):
    """One seat of a role game against ``opponent``; subclasses name the rules and their probes."""

    _probes: tuple[tuple[RewardProbe, ...], ...] = ((), ())
    """Per seat: the reward-hacking attacks the conformance checker plays on that seat."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        opponent: str | MessageCompleter = "minimax",
        seat: int = 0,
        max_turns: int = DEFAULT_MAX_TURNS,
        opponent_timeout: float = DEFAULT_OPPONENT_TIMEOUT,
        **settings: int,
    ) -> None:
        game = self.game_factory(settings).make(ctx.seed)
        coordinator = coordinator_against(game, seat, opponent, ctx.seed, opponent_timeout=opponent_timeout)
        super().__init__(ctx, coordinator, seat, max_turns=max_turns)

    @classmethod
    def game_factory(cls, env_kwargs: Mapping[str, object]) -> GameFactory:
        raise NotImplementedError

    def reward_probes(self) -> Sequence[RewardProbe]:
        return self._probes[self.seat]


class TwentyQuestionsDuelEnv(_RoleEnv):
    """``twenty_questions_duel-v0``: seat 0 asks, seat 1 answers (truthfulness judged on :data:`SECRETS`)."""

    _probes = (
        (RewardProbe("asker guesses at once", "[guess cat]", _BELOW),),
        (
            RewardProbe("answerer always says yes", "[yes]", _BELOW, then=("[yes]",) * 8),
            RewardProbe("answerer always says no", "[no]", _BELOW, then=("[no]",) * 8),
        ),
    )

    @classmethod
    def game_factory(cls, env_kwargs: Mapping[str, object]) -> TwentyQuestionsDuelFactory:
        return TwentyQuestionsDuelFactory(
            int_setting(env_kwargs, "max_questions", MAX_QUESTIONS),
            int_setting(env_kwargs, "retry_allowance", 1),
        )


class BargainEnv(_RoleEnv):
    """``bargain-v0``: seat 0 buys, seat 1 sells; each earns its surplus / 100, 0 without a deal."""

    _probes = (
        (
            RewardProbe("buyer offers 0", "[offer 0]", _BELOW, then=("[offer 0]",) * 6),
            RewardProbe("malformed offer", "[offer -5 dollars]", _BELOW),
        ),
        (
            RewardProbe("seller asks an absurd price", "[offer 100]", _BELOW, then=("[offer 100]",) * 6),
            RewardProbe("seller offers over the range", "[offer 1000]", _BELOW),
        ),
    )

    @classmethod
    def game_factory(cls, env_kwargs: Mapping[str, object]) -> BargainFactory:
        return BargainFactory(
            int_setting(env_kwargs, "rounds", BARGAIN_ROUNDS), int_setting(env_kwargs, "retry_allowance", 1)
        )


class ReferentialEnv(_RoleEnv):
    """``referential-v0``: seat 0 describes the target, seat 1 picks it; both share the reward."""

    _probes = (
        (
            RewardProbe("describer writes an index", "[describe 2]", _BELOW),
            RewardProbe("describer says nothing useful", "[describe large]", _BELOW),
        ),
        (RewardProbe("picker always picks the first", "[pick small red circle]", _BELOW),),
    )

    @classmethod
    def game_factory(cls, env_kwargs: Mapping[str, object]) -> ReferentialFactory:
        return ReferentialFactory(
            int_setting(env_kwargs, "candidates", CANDIDATES), int_setting(env_kwargs, "retry_allowance", 1)
        )
