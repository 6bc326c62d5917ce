"""Game adapter benchmarks: step cost against raw textarena, and self-play episodes/s per game.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/game_steps.py [--games 200] [--episodes 3] [--max-plies 100]

Part 1 replays the same TicTacToe move sequences four ways and reports microseconds per ply:
raw textarena (``-raw`` env: step + get_observation), raw + tokenizing each observation, the adapter's
game (``TextArenaGame``: isolated RNG, message formatting, move extraction, verdicts), and the full
self-play Env step (renderer parse of the reply tokens, coordinator, next prompt tokens).
Part 2 plays every available catalog game with random listed moves for every seat (scripted policy
through the coordinator-level game object) and reports episodes per second.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

# Run as a script, this file's directory would shadow the ``games`` package; use the repo root instead.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from envsuite import Env, RendererConfig  # noqa: E402
from envsuite.games.chess import ChessFactory  # noqa: E402
from envsuite.games.multiagent import RandomOpponent, SeatView, SelfPlayGroupBuilder  # noqa: E402
from envsuite.games.textarena import TextArenaFactory, available_games, record  # noqa: E402
from envsuite.games.tictactoe import TicTacToeFactory  # noqa: E402
from envsuite.turn_games import GameFactory  # noqa: E402

Moves = list[str]


def _record_games(n: int) -> list[Moves]:
    import textarena as ta

    rng, games = random.Random(0), []
    for i in range(n):
        env = ta.make("TicTacToe-v0-raw")
        env.reset(num_players=2, seed=i)
        free, moves, done = list(range(9)), [], False
        while not done:
            cell = free.pop(rng.randrange(len(free)))
            moves.append(f"[{cell}]")
            done, _ = env.step(f"[{cell}]")
        games.append(moves)
    return games


def _time(fn: Callable[[list[Moves]], int], games: list[Moves]) -> float:
    fn(games[:5])
    start = time.perf_counter()
    plies = fn(games)
    return (time.perf_counter() - start) / plies * 1e6


def _raw(games: list[Moves], tokenize: Callable[[str], list[int]] | None = None) -> int:
    import textarena as ta

    plies = 0
    for i, moves in enumerate(games):
        env = ta.make("TicTacToe-v0-raw")
        env.reset(num_players=2, seed=i)
        for move in moves:
            _, obs = env.get_observation()
            if tokenize is not None:
                tokenize("\n".join(f"[{s}] {m}" for s, m, _ in obs))
            env.step(move)
            plies += 1
    return plies


def _adapter(games: list[Moves]) -> int:
    plies = 0
    for i, moves in enumerate(games):
        game = TextArenaFactory("TicTacToe").make(i)
        for move in moves:
            game.observation(game.current_player())
            game.apply(game.extract_move(move))
            plies += 1
    return plies


def _env_steps(games: list[Moves], renderer: RendererConfig) -> int:
    tok = renderer.build().tokenizer
    encoded = [[tok.encode(m + "<|im_end|>", add_special_tokens=False) for m in moves] for moves in games]

    async def seat(env: Env, moves: list[list[int]]) -> int:
        await env.initial_observation()
        for n, move in enumerate(moves, 1):
            if (await env.step(move)).episode_done:
                return n
        return len(moves)

    async def run() -> int:
        plies = 0
        for i, moves in enumerate(encoded):
            envs = await SelfPlayGroupBuilder(TextArenaFactory("TicTacToe"), i, renderer=renderer).make_envs()
            done = await asyncio.gather(seat(envs[0], moves[0::2]), seat(envs[1], moves[1::2]))
            plies += sum(done)
        return plies

    return asyncio.run(run())


def step_costs(n_games: int, renderer: RendererConfig) -> None:
    games = _record_games(n_games)
    tok = renderer.build().tokenizer
    rows = {
        "raw textarena (step + get_observation)": _time(_raw, games),
        "raw + tokenize observation": _time(
            lambda g: _raw(g, lambda t: tok.encode(t, add_special_tokens=False)), games
        ),
        "adapter game (TextArenaGame)": _time(_adapter, games),
        "adapter self-play Env.step (tokens in/out)": _time(lambda g: _env_steps(g, renderer), games),
    }
    print(f"TicTacToe, {n_games} games, {sum(map(len, games))} plies; microseconds per ply")
    for name, us in rows.items():
        print(f"  {name:45s} {us:9.1f}")


def _episode(factory: GameFactory, seed: int, max_plies: int) -> int:
    game = factory.make(seed)
    players = [RandomOpponent(f"{seed}/{s}") for s in range(game.num_players)]
    plies = 0
    while not game.is_over() and plies < max_plies:
        seat = game.current_player()
        view = SeatView(seat, game.observation(seat), game.legal_moves(), game)
        game.apply(game.extract_move(asyncio.run(players[seat].act(view))))
        plies += 1
    game.close()
    return plies


def selfplay_rates(episodes: int, max_plies: int) -> None:
    factories: list[GameFactory] = [TicTacToeFactory(), ChessFactory()]
    factories += [TextArenaFactory(r.name) for r in available_games()]
    print(f"\nself-play, random listed moves, {episodes} episodes, <= {max_plies} plies each")
    print(f"  {'game':34s} {'episodes/s':>10s} {'plies/ep':>9s} {'legal known':>11s}")
    for factory in factories:
        start, plies, known = time.perf_counter(), 0, "n/a"
        try:
            for seed in range(episodes):
                plies += _episode(factory, seed, max_plies)
            probe = factory.make(0)
            known = "yes" if probe.legal_moves() else "no"
        except Exception as exc:
            print(f"  {factory.name:34s} failed: {exc!r:.60}")
            continue
        rate = episodes / (time.perf_counter() - start)
        print(f"  {factory.name:34s} {rate:10.1f} {plies / episodes:9.1f} {known:>11s}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--max-plies", type=int, default=100)
    parser.add_argument("--model", default="tiny-random")
    args = parser.parse_args()
    record("TicTacToe")
    step_costs(args.games, RendererConfig(model_name=args.model))
    selfplay_rates(args.episodes, args.max_plies)


if __name__ == "__main__":
    main()
