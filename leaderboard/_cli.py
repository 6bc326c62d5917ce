"""``envsuite leaderboard``: print the tables and optionally write the static page.

The envsuite CLI wires this in with :func:`add_arguments` (on its ``leaderboard`` sub-parser) and
:func:`run` (the handler); :func:`cli_main` is the same thing as a standalone entry point.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console

from envsuite import catalog_reward_ranges
from envsuite.leaderboard._board import build_leaderboard
from envsuite.leaderboard._db import MissingDriverError, StoreURLError, default_url
from envsuite.leaderboard._html import write_html
from envsuite.leaderboard._ratings import recompute_ratings
from envsuite.leaderboard._schema import SchemaTooNewError
from envsuite.leaderboard._stats import DEFAULT_BOOTSTRAP
from envsuite.leaderboard._store import ResultStore
from envsuite.leaderboard._terminal import render_overall, render_ratings, render_terminal


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default=None,
        help=f"store path or URL (sqlite:///PATH, postgresql://...); default: {default_url()}",
    )
    parser.add_argument(
        "--env",
        action="extend",
        nargs="+",
        default=None,
        metavar="ID",
        help="only these envs (repeatable; 'math' means every version, 'math-v0' one)",
    )
    parser.add_argument("--html", default=None, metavar="DIR", help="also write index.html + chart into DIR")
    parser.add_argument("--boot", type=int, default=DEFAULT_BOOTSTRAP, help="bootstrap replicates B")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap generator")
    parser.add_argument(
        "--recompute-ratings",
        action="store_true",
        help="replay all stored matches into the ratings table first",
    )


def run(args: argparse.Namespace, console: Console | None = None) -> int:
    """Render the leaderboard for parsed ``args``; returns a process exit code."""
    out = console or Console()
    try:
        with ResultStore(args.db) as store:
            if args.recompute_ratings:
                recompute_ratings(store)
            board = build_leaderboard(
                store,
                env_ids=args.env,
                n_boot=args.boot,
                seed=args.seed,
                catalog_ranges=catalog_reward_ranges(key.versioned_env_id for key in store.keys(args.env)),
            )
    except (StoreURLError, MissingDriverError, SchemaTooNewError, ValueError) as exc:
        print(f"envsuite leaderboard: error: {exc}", file=sys.stderr)
        return 2
    if not board.entries and not board.ratings:
        out.print(
            f"no results in {args.db or default_url()}" + (f" for {', '.join(args.env)}" if args.env else "")
        )
    else:
        out.print(render_terminal(board))
        if board.overall:
            out.print(render_overall(board))
        if board.ratings:
            out.print(render_ratings(board))
    if args.html:
        report = write_html(args.html, board)
        out.print(f"wrote {report.index}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="envsuite leaderboard", description="Rank stored evaluation results."
    )
    add_arguments(parser)
    return parser


def cli_main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point: ``python -m leaderboard [--db PATH] [--env ID...] [--html DIR]``."""
    return run(build_parser().parse_args(argv))
