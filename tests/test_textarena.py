"""The TextArena adapter: catalog entries, the probed table, offline word games, RNG isolation, moves."""

from __future__ import annotations

import asyncio
import random

import nltk
import pytest

import envsuite
from envsuite import RendererConfig, StopReason, UnavailableEnvError, make_env
from envsuite.games.multiagent import RandomOpponent, SeatView, bracket_action, listed_moves
from envsuite.games.textarena import (
    TextArenaGame,
    all_games,
    available_games,
    ensure_offline_nltk,
    nltk_data_dir,
    probe_game,
    record,
)

RENDERER = RendererConfig(model_name="tiny-random")


def _tokens(text: str) -> list[int]:
    renderer = RENDERER.build()
    stop = renderer.get_stop_sequences()
    end = [stop[0]] if stop and isinstance(stop[0], int) else []
    return renderer.tokenizer.encode(text, add_special_tokens=False) + end


def test_every_game_is_in_the_catalog_with_a_reason_when_unavailable() -> None:
    assert len(all_games()) == 95
    assert len(available_games()) >= 75
    chess = envsuite.spec("textarena/Chess-v0")
    assert chess.unavailable is not None and "3.12" in chess.unavailable
    assert "API key" in (envsuite.spec("textarena/TwentyQuestions-v0").unavailable or "")
    assert envsuite.spec("textarena/TicTacToe-v0").unavailable is None
    assert envsuite.spec("textarena/Wordle-v0").unavailable is None
    with pytest.raises(ValueError, match="TicTacToe"):
        record("TicTacToo")


@pytest.mark.parametrize("name", ["TicTacToe", "KuhnPoker", "Wordle", "Chess", "TwentyQuestions", "Nim"])
def test_probe_still_agrees_with_the_shipped_table(name: str) -> None:
    assert probe_game(name) == record(name)


def test_word_games_run_offline_without_downloads() -> None:
    root = ensure_offline_nltk()
    assert root == nltk_data_dir()
    assert (root / "corpora" / "words" / "en").stat().st_size > 100_000
    assert nltk.download("words") is True  # stubbed: no network attempt
    game = TextArenaGame(record("Hangman"), seed=5)
    assert "[" in game.observation(0)
    assert game.apply("[e]").status.value in ("accepted", "retry")


def _transcript(game: TextArenaGame, policy: RandomOpponent, steps: int) -> list[str]:
    out = []
    for _ in range(steps):
        if game.is_over():
            break
        seat = game.current_player()
        text = game.observation(seat)
        reply = asyncio.run(policy.act(SeatView(seat, text, game.legal_moves(), game)))
        out += [text, reply, game.apply(game.extract_move(reply)).status.value]
    return out


def test_seed_fixes_the_episode_and_interleaved_games_do_not_interfere() -> None:
    alone = {
        name: _transcript(TextArenaGame(record(name), seed=11), RandomOpponent(1), 12)
        for name in ("KuhnPoker", "Wordle")
    }
    before = random.getstate()
    games = {name: TextArenaGame(record(name), seed=11) for name in alone}
    policies = {name: RandomOpponent(1) for name in alone}
    mixed: dict[str, list[str]] = {name: [] for name in alone}
    for _ in range(12):
        for name, game in games.items():
            random.random()  # the caller's own use of the global generator must not leak in
            mixed[name] += _transcript(game, policies[name], 1)
    assert mixed == alone
    random.setstate(before)
    state = random.getstate()
    TextArenaGame(record("Poker"), seed=3).apply("[check]")
    assert random.getstate() == state


def test_moves_are_read_from_the_last_bracket() -> None:
    assert bracket_action("Hmm, [3] is weak; I'll take [ 5 ] instead.") == "[5]"
    assert bracket_action("no brackets") == "[no brackets]"
    assert listed_moves("e.g. '[4]'\nAvailable Moves: '[0]', '[2]'") == ["[0]", "[2]"]
    assert listed_moves("nothing listed") is None


async def _play(env: envsuite.Env, replies: list[str]) -> envsuite.StepResult:
    first = await env.initial_observation()
    assert not isinstance(first, envsuite.InitialObservationOverflow)
    for reply in replies:
        result = await env.step(_tokens(reply))
        if result.episode_done:
            return result
    raise AssertionError("episode did not end")


async def test_tictactoe_plays_against_the_random_opponent() -> None:
    env = make_env("textarena/TicTacToe-v0", seed=2, renderer=RENDERER)
    replies = [f"My move: [{cell}]" for cell in range(9)] * 2
    result = await _play(env, replies)
    assert result.stop_reason in (StopReason.COMPLETED, StopReason.INVALID_MOVE)
    assert result.metrics[f"stop/{result.stop_reason}"] == 1.0
    assert result.reward in (-1.0, 0.0, 1.0)


async def test_second_illegal_move_loses_after_a_reprompt() -> None:
    env = make_env("textarena/TicTacToe-v0", seed=2, renderer=RENDERER)
    await env.initial_observation()
    first = await env.step(_tokens("I refuse to play"))
    assert not first.episode_done
    prompt = RENDERER.build().tokenizer.decode(first.next_observation.to_ints())
    assert "invalid move" in prompt.lower()
    second = await env.step(_tokens("[42]"))
    assert second.episode_done and second.stop_reason is StopReason.INVALID_MOVE
    assert second.reward == -1.0


async def test_garbage_tokens_never_raise() -> None:
    rng = random.Random(0)
    for env_id in ("textarena/TicTacToe-v0", "textarena/Nim-v0", "textarena/GuessTheNumber-v0"):
        env = make_env(env_id, seed=1, renderer=RENDERER)
        await env.initial_observation()
        for action in ([], [rng.randrange(49152) for _ in range(50)], [0xFFFF] * 3, [2]):
            result = await env.step(action)
            if result.episode_done:
                assert result.stop_reason is not None
                break


def test_unavailable_games_fail_with_their_reason() -> None:
    with pytest.raises(UnavailableEnvError, match=r"3\.12"):
        make_env("textarena/Chess-v0", seed=0, renderer=RENDERER)
