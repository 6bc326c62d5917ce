"""chess-v0: move parsing, legality, draw rules, the illegal-move convention and the env."""

from __future__ import annotations

import chess
import pytest

from envsuite import RendererConfig, StopReason, make_env
from envsuite.games.chess import ChessGame, parse_move, uci_vocabulary
from envsuite.turn_games import MoveStatus

RENDERER = RendererConfig(model_name="tiny-random")


def _play(game: ChessGame, moves: list[str]) -> None:
    for move in moves:
        assert game.apply(move).status is MoveStatus.ACCEPTED, move


def test_san_and_uci_are_both_accepted() -> None:
    board = chess.Board()
    assert parse_move(board, "Nf3") == chess.Move.from_uci("g1f3")
    assert parse_move(board, "[g1f3]") == chess.Move.from_uci("g1f3")
    assert parse_move(board, "E2E4") == chess.Move.from_uci("e2e4")
    assert parse_move(board, "e5") is None
    assert parse_move(board, "drop table") is None
    assert len(uci_vocabulary()) == 64 * 63 + 8 * 2 * 3 * 4 - 2 * 2 * 4
    assert all(m.uci() in uci_vocabulary() for m in board.legal_moves)


def test_fools_mate_ends_the_game() -> None:
    game = ChessGame()
    assert game.extract_move("I will play [f3] now") == "f3"
    _play(game, ["f3", "e5", "g4", "Qh4#"])
    outcome = game.outcome()
    assert outcome is not None and outcome.rewards == (-1.0, 1.0) and "checkmate" in outcome.reason


def test_illegal_move_retries_once_then_loses() -> None:
    game = ChessGame()
    assert game.apply("e5").status is MoveStatus.RETRY
    assert "Illegal move" in game.observation(0)
    assert game.apply("Ke2").status is MoveStatus.FORFEIT
    outcome = game.outcome()
    assert outcome is not None and outcome.rewards == (-1.0, 1.0) and outcome.invalid_move_by == (0,)


def test_a_legal_move_resets_the_retry() -> None:
    game = ChessGame()
    assert game.apply("zz").status is MoveStatus.RETRY
    _play(game, ["e4"])
    assert game.apply("zz").status is MoveStatus.RETRY
    assert not game.is_over()


@pytest.mark.parametrize(
    ("fen", "moves", "claim", "reason"),
    [
        ("7k/5Q2/6K1/8/8/8/8/8 b - - 0 1", [], True, "stalemate"),
        ("8/8/8/4k3/8/8/8/4K2N w - - 0 1", [], True, "insufficient material"),
        ("4k3/8/8/8/8/8/8/R3K3 w - - 98 80", ["Ra2"], True, "fifty moves"),
        ("4k3/8/8/8/8/8/8/R3K3 w - - 149 100", ["Ra2"], False, "seventyfive moves"),
        (None, ["Nf3", "Nf6", "Ng1", "Ng8", "Nf3", "Nf6", "Ng1"], True, "threefold repetition"),
        (None, ["Nf3", "Nf6", "Ng1", "Ng8"] * 4, False, "fivefold repetition"),
    ],
)
def test_draw_rules(fen: str | None, moves: list[str], claim: bool, reason: str) -> None:
    game = ChessGame(fen=fen, claim_draws=claim)
    _play(game, moves)
    outcome = game.outcome()
    assert outcome is not None and outcome.rewards == (0.0, 0.0)
    assert reason in outcome.reason
    if moves:
        assert not ChessGame(fen=fen, claim_draws=claim).is_over()


async def test_chess_env_against_the_random_opponent() -> None:
    env = make_env("chess-v0", seed=4, renderer=RENDERER, seat=1, max_turns=3)
    first = await env.initial_observation()
    assert not isinstance(first, tuple) or first[0].length > 0
    text = RENDERER.build().tokenizer.decode(first[0].to_ints()) if isinstance(first, tuple) else ""
    assert "White played" in text and "Black" in text
    result = None
    for reply in ["[a6]", "[a5]", "[a4]", "[h6]"]:
        result = await env.step(RENDERER.build().tokenizer.encode(reply, add_special_tokens=False))
        if result.episode_done:
            break
    assert result is not None and result.episode_done
    assert result.stop_reason in (StopReason.MAX_TURNS, StopReason.INVALID_MOVE, StopReason.COMPLETED)
