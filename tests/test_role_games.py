"""The role-asymmetric games (issue 59): per-seat rewards judged by the game, seeded private state,
the reward-hacking probes, PettingZoo's API tests and the conformance checker on their catalog ids."""

from __future__ import annotations

import asyncio
import random
import warnings
from collections.abc import Sequence

import pytest
from pettingzoo.test import api_test, parallel_api_test

import envsuite
from envsuite import RendererConfig
from envsuite.adapters.pettingzoo import TurnGameAECEnv, TurnGameParallelEnv
from envsuite.core import Env, InitialObservationOverflow, StepResult
from envsuite.games.multiagent import SelfPlayGroupBuilder
from envsuite.games.roles import (
    SECRETS,
    Bargain,
    BargainFactory,
    Referential,
    ReferentialFactory,
    TwentyQuestionsDuel,
    TwentyQuestionsDuelFactory,
)
from envsuite.turn_games import GameFactory, MoveStatus

ROLE_IDS = (
    "twenty_questions_duel-v0",
    "twenty_questions_duel_answerer-v0",
    "bargain-v0",
    "bargain_seller-v0",
    "referential-v0",
    "referential_picker-v0",
)


def _play(game: TwentyQuestionsDuel | Bargain | Referential, moves: dict[int, str]) -> tuple[float, ...]:
    """Play until the end: seat -> a fixed move, or "best" for the game's scripted player."""
    for _ in range(100):
        if game.is_over():
            break
        seat = game.current_player()
        move = moves.get(seat, "best")
        chosen = game.best_moves()[0] if move == "best" else move
        game.apply(chosen)
    outcome = game.outcome()
    assert outcome is not None
    return outcome.rewards


def test_scripted_duel_finds_every_secret_and_answers_truthfully() -> None:
    found = set()
    for seed in range(40):
        game = TwentyQuestionsDuel(seed)
        asker, answerer = _play(game, {})
        assert answerer == 1.0
        assert asker > 0.0
        found.add(game.secret)
    assert found == set(SECRETS)


def test_an_answerer_that_always_says_yes_loses_reward_and_cannot_lift_the_asker() -> None:
    honest = [_play(TwentyQuestionsDuel(seed), {}) for seed in range(20)]
    yes_man = [_play(TwentyQuestionsDuel(seed), {1: "[yes]"}) for seed in range(20)]
    assert sum(a for _, a in yes_man) < sum(a for _, a in honest)
    assert sum(a for a, _ in yes_man) <= sum(a for a, _ in honest)


def test_duel_refuses_questions_outside_the_table_then_forfeits() -> None:
    game = TwentyQuestionsDuel(0)
    assert game.apply("[ask is it blue]").status is MoveStatus.RETRY
    assert game.apply("[guess unicorn]").status is MoveStatus.FORFEIT
    assert game.outcome() is not None and game.outcome().rewards == (-1.0, 1.0)  # type: ignore[union-attr]


def test_bargain_pays_each_side_its_surplus_and_nothing_without_a_deal() -> None:
    game = Bargain(3)
    game.apply("[offer 60]")  # the seller opens
    game.apply("[accept]")
    assert game.outcome().rewards == ((game.value - 60) / 100, (60 - game.cost) / 100)  # type: ignore[union-attr]
    stubborn = Bargain(3, rounds=4)
    rewards = _play(stubborn, {0: "[offer 0]", 1: "[offer 100]"})
    assert rewards == (0.0, 0.0)


def test_bargain_refuses_malformed_and_absurd_offers() -> None:
    game = Bargain(0)
    assert game.apply("[offer 1000]").status is MoveStatus.RETRY
    assert game.apply("[accept]").status is MoveStatus.FORFEIT  # nothing to accept yet
    assert game.outcome().rewards == (1.0, -1.0)  # type: ignore[union-attr]


def test_bargain_valuations_come_from_its_own_seed_not_the_global_random() -> None:
    random.seed(1)
    first = Bargain(7)
    random.seed(2)
    second = Bargain(7)
    assert (first.value, first.cost) == (second.value, second.cost)
    assert len({(Bargain(s).value, Bargain(s).cost) for s in range(20)}) > 10


def test_referential_shares_the_reward_and_refuses_an_index() -> None:
    game = Referential(5)
    assert game.apply("[describe 2]").status is MoveStatus.RETRY
    game.apply(f"[describe {game.target}]")
    game.apply(f"[pick {game.target}]")
    assert game.outcome().rewards == (1.0, 1.0)  # type: ignore[union-attr]
    wrong = Referential(5)
    wrong.apply("[describe large]")
    other = next(o for o in wrong.candidates if o != wrong.target)
    wrong.apply(f"[pick {other}]")
    assert wrong.outcome().rewards == (0.0, 0.0)  # type: ignore[union-attr]


def test_referential_seats_see_different_orders_on_some_seed() -> None:
    assert any(Referential(seed).views[0] != Referential(seed).views[1] for seed in range(10))


def test_scripted_referential_pair_always_succeeds() -> None:
    assert all(_play(Referential(seed), {}) == (1.0, 1.0) for seed in range(20))


@pytest.mark.parametrize(
    "factory", [TwentyQuestionsDuelFactory(), BargainFactory(), ReferentialFactory()], ids=lambda f: f.name
)
def test_role_games_pass_pettingzoos_api_tests(factory: GameFactory) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api_test(TurnGameAECEnv(factory, model="tiny-random", obs_tokens=64, max_steps=40), num_cycles=50)
        parallel_api_test(
            TurnGameParallelEnv(factory, model="tiny-random", obs_tokens=64, max_steps=40), num_cycles=50
        )


def test_role_ids_are_available_so_the_catalog_conformance_checks_them() -> None:
    """Every role id passes the conformance checker with its reward probes in tests/test_conformance.py
    (in full there; a quick repeat here added time and no assertion): it must stay available."""
    for env_id in ROLE_IDS:
        spec = envsuite.registry.spec(env_id)
        assert not spec.unavailable and not spec.deprecated, env_id


async def _scripted_rollout(env: Env, replies: Sequence[str]) -> list[StepResult]:
    """Play ``replies`` in turn (the last one repeated) on one seat env."""
    tokenizer = RendererConfig(model_name="tiny-random").build().tokenizer
    first = await env.initial_observation()
    assert not isinstance(first, InitialObservationOverflow)
    results: list[StepResult] = []
    while not results or not results[-1].episode_done:
        reply = replies[min(len(results), len(replies) - 1)] + "<|im_end|>"
        results.append(await env.step(tokenizer.encode(reply, add_special_tokens=False)))
    return results


async def test_both_seats_of_a_duel_are_policies_and_each_gets_its_own_reward() -> None:
    renderer = RendererConfig(model_name="tiny-random")
    for seed in range(6):
        builder = SelfPlayGroupBuilder(game=TwentyQuestionsDuelFactory(), seed=seed, renderer=renderer)
        asker_env, answerer_env = await builder.make_envs()
        asker, answerer = await asyncio.gather(
            _scripted_rollout(asker_env, ["[ask alive]", "[guess cat]"]),
            _scripted_rollout(answerer_env, ["[yes]"]),
        )
        asker_reward, answerer_reward = asker[-1].reward, answerer[-1].reward
        assert asker_reward in (0.0, 0.9)
        assert answerer_reward in (0.0, 1.0)  # one answer: truthful (the secret is alive) or a lie
        if asker_reward == 0.9:  # found the cat, which is alive: "yes" was the truth
            assert answerer_reward == 1.0
        assert asker[-1].metrics["found_secret"] == float(asker_reward == 0.9)
        assert answerer[-1].metrics["truthful_share"] == answerer_reward


async def test_a_role_selfplay_ids_held_out_group_plays_every_role_against_the_script() -> None:
    """``referential_selfplay-v0``'s test split: one env per seat of one game, each against the scripted
    other seat (so a run with a policy per role measures every role); its train split stays both seats
    of every game."""
    for seed in range(4):
        target = Referential(seed).target  # the env's game is built from the same seed
        wrong = next(o for o in Referential(seed).candidates if o != target)
        for pick, reward in ((target, 1.0), (wrong, 0.0)):
            test = envsuite.make_group_builder(
                "referential_selfplay-v0", seed=seed, split="test", group_size=1, model="tiny-random"
            )
            describer, picker = await test.make_envs()
            assert (getattr(describer, "seat", None), getattr(picker, "seat", None)) == (0, 1)
            # Each env ends alone: its other seat is the scripted player, not a waiting policy.
            described = await _scripted_rollout(describer, [f"[describe {pick}]"])
            picked = await _scripted_rollout(picker, [f"[pick {pick}]"])
            assert [r.reward for r in described] == [r.reward for r in picked] == [reward]
        train = envsuite.make_group_builder(
            "referential_selfplay-v0", seed=seed, split="train", group_size=4, model="tiny-random"
        )
        assert [getattr(env, "seat", None) for env in await train.make_envs()] == [0, 1, 0, 1]
