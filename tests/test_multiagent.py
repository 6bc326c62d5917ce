"""The generic coordinator, opponents and group builders (self-play, fixed opponents, pools)."""

from __future__ import annotations

import asyncio
import pickle
import random
from collections.abc import Callable, Sequence

import pytest

from envsuite import Env, InitialObservationOverflow, Message, MessageCompleter, RendererConfig, StopReason
from envsuite.core import StepResult
from envsuite.games.chess import ChessFactory
from envsuite.games.multiagent import (
    CompleterOpponentConfig,
    MinimaxOpponentConfig,
    Opponent,
    OpponentConfig,
    OpponentPool,
    OpponentPoolGroupBuilder,
    RandomOpponentConfig,
    SeatView,
    SelfPlayGroupBuilder,
    VsOpponentGroupBuilder,
    listed_moves,
)
from envsuite.games.textarena import TextArenaFactory
from envsuite.games.tictactoe import TicTacToeFactory, TicTacToeGame
from envsuite.turn_games import MoveStatus

RENDERER = RendererConfig(model_name="tiny-random")
Policy = Callable[[str], str]


def _random_policy(seed: int) -> Policy:
    rng = random.Random(seed)

    def act(prompt: str) -> str:
        legal = listed_moves(prompt.rsplit("<|im_start|>user", 1)[-1])
        return rng.choice(legal) if legal else "[0]"

    return act


async def _rollout(env: Env, policy: Policy) -> list[StepResult]:
    tok = RENDERER.build().tokenizer
    first = await env.initial_observation()
    assert not isinstance(first, InitialObservationOverflow)
    prompt, results = first[0], []
    while True:
        reply = policy(tok.decode(prompt.to_ints())) + "<|im_end|>"
        result = await env.step(tok.encode(reply, add_special_tokens=False))
        results.append(result)
        if result.episode_done:
            return results
        prompt = result.next_observation


def test_minimax_never_loses_at_tictactoe() -> None:
    for seed in range(4):
        game, rng = TicTacToeGame(), random.Random(seed)
        minimax = MinimaxOpponentConfig().build(seed, 1)
        while not game.is_over():
            if game.current_player() == 0:
                game.apply(rng.choice(game.legal_moves() or []))
            else:
                view = SeatView(1, game.observation(1), game.legal_moves(), game)
                game.apply(asyncio.run(minimax.act(view)))
        outcome = game.outcome()
        assert outcome is not None and outcome.rewards[1] >= 0.0


def test_tictactoe_rules() -> None:
    game = TicTacToeGame()
    for move in ["[0]", "[3]", "[1]", "[4]"]:
        assert game.apply(move).status is MoveStatus.ACCEPTED
    assert game.apply("[0]").status is MoveStatus.RETRY
    assert game.apply("[2]").status is MoveStatus.ACCEPTED
    outcome = game.outcome()
    assert outcome is not None and outcome.rewards == (1.0, -1.0)


@pytest.mark.parametrize("move", ["[9]", "9", "[²]", "[٣]", "[-1]", "[]"])
def test_tictactoe_refuses_moves_that_name_no_cell(move: str) -> None:
    """A digit outside 0-8 (or a non-ASCII digit) is an illegal move, never an IndexError."""
    game = TicTacToeGame()
    result = game.apply(move)
    assert result.status is MoveStatus.RETRY and result.reason == "not a cell 0-8"
    assert game.apply(move).status is MoveStatus.FORFEIT


async def test_self_play_records_every_seat() -> None:
    builder = SelfPlayGroupBuilder(game=TicTacToeFactory(), seed=3, renderer=RENDERER, games_per_group=2)
    envs = await builder.make_envs()
    assert len(envs) == 4
    runs = await asyncio.gather(*(_rollout(env, _random_policy(i)) for i, env in enumerate(envs)))
    for game in range(2):
        x, o = runs[2 * game], runs[2 * game + 1]
        assert x[-1].reward == -o[-1].reward
        assert abs(len(x) - len(o)) <= 1 + sum(r.metrics.get("invalid_moves", 0) for r in x + o)
        assert all(r.stop_reason is StopReason.COMPLETED for r in (x[-1], o[-1]))


async def test_self_play_textarena_and_chess_groups() -> None:
    for factory in (TextArenaFactory("KuhnPoker"), ChessFactory()):
        builder = SelfPlayGroupBuilder(game=factory, seed=1, renderer=RENDERER, max_turns=4)
        envs = await builder.make_envs()
        runs = await asyncio.gather(*(_rollout(env, _random_policy(i)) for i, env in enumerate(envs)))
        assert all(run[-1].episode_done and run[-1].stop_reason is not None for run in runs)


class _Raises(Opponent):
    async def act(self, view: SeatView) -> str:
        raise RuntimeError("partner crashed")


class _Hangs(Opponent):
    async def act(self, view: SeatView) -> str:
        await asyncio.sleep(3600)
        return "[0]"


class _Config(OpponentConfig):
    def __init__(self, make: Callable[[], Opponent]) -> None:
        self._make = make

    def build(self, seed: int, seat: int) -> Opponent:
        return self._make()

    @property
    def name(self) -> str:
        return "test"


async def test_failing_and_hanging_opponents_end_their_game_only() -> None:
    def vs(opponent: OpponentConfig, seed: int) -> VsOpponentGroupBuilder:
        return VsOpponentGroupBuilder(
            game=TicTacToeFactory(), seed=seed, opponent=opponent, renderer=RENDERER, opponent_timeout=0.2
        )

    builders = [vs(_Config(_Raises), 0), vs(_Config(_Hangs), 1), vs(RandomOpponentConfig(), 2)]
    groups = await asyncio.gather(*(b.make_envs() for b in builders))
    runs = await asyncio.gather(*(_rollout(envs[0], _random_policy(0)) for envs in groups))
    assert runs[0][-1].stop_reason is StopReason.PARTNER_ERROR and runs[0][-1].reward == 0.0
    assert runs[1][-1].stop_reason is StopReason.PARTNER_ERROR
    assert runs[2][-1].stop_reason is StopReason.COMPLETED


class _EchoCompleter(MessageCompleter):
    async def __call__(self, messages: list[Message]) -> Message:
        legal = listed_moves(messages[-1]["content"]) or ["[0]"]
        return {"role": "assistant", "content": f"I pick {legal[-1]}"}


async def test_completer_opponent_and_pools_pickle_and_mix() -> None:
    pool = OpponentPool(
        (RandomOpponentConfig(), MinimaxOpponentConfig(), CompleterOpponentConfig(_EchoCompleter()))
    )
    chosen = {OpponentPoolGroupBuilder(TicTacToeFactory(), seed, pool).opponent.name for seed in range(30)}
    assert len(chosen) == 3
    builder = OpponentPoolGroupBuilder(TicTacToeFactory(), 7, pool, renderer=RENDERER, group_size=3)
    clone = pickle.loads(pickle.dumps(builder))
    assert clone.seed == builder.seed and clone.opponent.name == builder.opponent.name
    envs: Sequence[Env] = await clone.make_envs()
    runs = await asyncio.gather(*(_rollout(env, _random_policy(5)) for env in envs))
    assert len({tuple(r.reward for r in run) for run in runs}) == 1  # one seed, one episode
    completer_game = VsOpponentGroupBuilder(
        TicTacToeFactory(), 0, CompleterOpponentConfig(_EchoCompleter()), renderer=RENDERER
    )
    pickle.dumps(SelfPlayGroupBuilder(TextArenaFactory("Nim"), 0, renderer=RENDERER))
    run = await _rollout((await completer_game.make_envs())[0], _random_policy(1))
    assert run[-1].stop_reason is StopReason.COMPLETED


def test_game_settings_convert_like_int_and_float_and_refuse_other_types() -> None:
    """A game env's settings arrive as untyped kwargs: numbers and numeric text convert as int()/float()
    would, absent ones take the default, and anything else is a TypeError naming the setting."""
    from envsuite.turn_games import float_setting, int_setting, optional_setting

    kwargs = {"n": 3.0, "text": "4", "reward": 1, "fen": "8/8/8/8/8/8/8/8 w - - 0 1", "bad": [1]}
    assert int_setting(kwargs, "n", 0) == 3 and int_setting(kwargs, "text", 0) == 4
    assert int_setting(kwargs, "absent", 7) == 7
    assert float_setting(kwargs, "reward", 0.0) == 1.0 and float_setting(kwargs, "absent", 0.5) == 0.5
    assert (
        optional_setting(kwargs, "fen", str) == kwargs["fen"]
        and optional_setting(kwargs, "absent", str) is None
    )
    with pytest.raises(TypeError, match="bad"):
        int_setting(kwargs, "bad", 0)
    with pytest.raises(TypeError, match="bad"):
        float_setting(kwargs, "bad", 0.0)
    with pytest.raises(TypeError, match="n must be a str"):
        optional_setting(kwargs, "n", str)
