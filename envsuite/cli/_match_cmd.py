"""``envsuite match ENV_ID --a POLICY --b POLICY``: two models play a two-player catalog game head to head.

A and B are model names or checkpoint directories (a trained run's ``sampler_path``). A plays X in
even games and O in odd ones. The result is A's score (win 1, draw 0.5, loss 0) with a bootstrap
confidence interval; a trained policy beats B when the whole interval lies above 0.5.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from envsuite.cli._args import Subparsers, parse_env_args


def add_parser(sub: Subparsers) -> None:
    """Add ``envsuite match`` to the command's sub-parsers."""
    p = sub.add_parser(
        "match",
        help="two models play a two-player game head to head (A's score with a confidence interval)",
        description=__doc__,
    )
    p.add_argument("env_id", metavar="ENV_ID")
    p.add_argument("--a", required=True, help="policy A: model name or checkpoint dir")
    p.add_argument("--b", required=True, help="policy B: model name or checkpoint dir")
    p.add_argument("--games", type=int, default=100, help="games (A alternates seats)")
    p.add_argument("--max-tokens", type=int, default=16, help="sampling budget per move")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env keyword argument")
    p.add_argument("--out", default=None, help="write every game as a JSON line here")


def match_summary(
    env_id: str,
    a: str,
    b: str,
    *,
    games: int,
    max_tokens: int,
    temperature: float,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    out: Path | None = None,
) -> dict[str, Any]:
    """Play the match and return A's score with its 95% CI, the counts and the settings."""
    from envsuite.backends import local_sampling_client
    from envsuite.completers import SamplingTokenCompleter
    from envsuite.games.multiagent import play_match
    from envsuite.trainers import mean_ci

    policies = [
        SamplingTokenCompleter(
            local_sampling_client(name), max_tokens=max_tokens, temperature=temperature, seed=seed + i
        )
        for i, name in enumerate((a, b))
    ]
    result = asyncio.run(
        play_match(env_id, policies[0], policies[1], n_games=games, seed=seed, env_kwargs=env_kwargs)
    )
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(asdict(g)) + "\n" for g in result.games), encoding="utf-8")
    score = mean_ci([g.score_a for g in result.games])
    return {
        "env_id": result.env_id,
        "a": a,
        "b": b,
        "games": len(result.games),
        "score_a": score.mean,
        "ci95": [score.low, score.high],
        **result.counts(),
        "a_forfeits": sum(g.stop_a == "invalid_move" for g in result.games),
        "b_forfeits": sum(g.stop_b == "invalid_move" for g in result.games),
        "max_tokens": max_tokens,
        "temperature": temperature,
        "seed": seed,
    }


def run(args: argparse.Namespace) -> int:
    """Play the match and print A's score with its interval and the verdict."""
    summary = match_summary(
        args.env_id,
        args.a,
        args.b,
        games=args.games,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        seed=args.seed,
        env_kwargs=parse_env_args(args.env_arg),
        out=Path(args.out) if args.out else None,
    )
    low, high = summary["ci95"]
    verdict = "A is stronger" if low > 0.5 else "B is stronger" if high < 0.5 else "no clear winner"
    print(
        f"{summary['env_id']}: A scores {summary['score_a']:.3f} [{low:.3f}, {high:.3f}] over {summary['games']} "
        f"games (W {summary['wins']} / D {summary['draws']} / L {summary['losses']}; forfeits A "
        f"{summary['a_forfeits']}, B {summary['b_forfeits']}): {verdict}"
    )
    return 0
