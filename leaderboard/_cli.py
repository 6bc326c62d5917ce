"""``envsuite leaderboard``: print the tables (or JSON) and optionally write the static page.

The envsuite CLI wires this in with :func:`add_arguments` (on its ``leaderboard`` sub-parser) and
:func:`run` (the handler); :func:`cli_main` is the same thing as a standalone entry point.

Reading never creates a store. Without ``--db`` the default store is read when it exists; otherwise
the stores under ``runs/`` (where ``envsuite bench`` and ``make demo`` write) are looked for: one is
read and named, several are listed.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from envsuite import catalog_reward_ranges
from envsuite.leaderboard._board import Leaderboard, build_leaderboard
from envsuite.leaderboard._db import (
    DEFAULT_DB_ENV,
    Backend,
    MissingDriverError,
    StoreNotFoundError,
    StoreURLError,
    default_url,
    parse_url,
)
from envsuite.leaderboard._export import board_json
from envsuite.leaderboard._html import write_html
from envsuite.leaderboard._schema import SchemaTooNewError
from envsuite.leaderboard._serve import start_server
from envsuite.leaderboard._stats import DEFAULT_BOOTSTRAP
from envsuite.leaderboard._store import ResultStore, recompute_ratings
from envsuite.leaderboard._terminal import render_overall, render_ratings, render_terminal
from envsuite.leaderboard._text import display_text

STORE_SEARCH_ROOT = Path("runs")
STORE_FILE_NAME = "leaderboard.sqlite"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default=None,
        help=f"store path or URL (sqlite:///PATH, postgresql://...); default: ${DEFAULT_DB_ENV}, else "
        f"{default_url()}, else the one store under {STORE_SEARCH_ROOT}/ (make demo writes "
        f"runs/demo/{STORE_FILE_NAME})",
    )
    parser.add_argument(
        "--env",
        action="extend",
        nargs="+",
        default=None,
        metavar="ID",
        help="only these envs (repeatable; 'math' means every version, 'math-v0' one)",
    )
    parser.add_argument("--html", default=None, metavar="DIR", help="also write the static page into DIR")
    parser.add_argument("--json", action="store_true", help="print the leaderboard as JSON (for scripts)")
    parser.add_argument(
        "--baseline",
        default=None,
        metavar="MODEL",
        help="model the per-model pages compare with (default: the best other)",
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="after writing --html DIR, serve it on 127.0.0.1 (Inspect's bundled viewer needs http) until Ctrl-C",
    )
    parser.add_argument("--port", type=int, default=8765, help="port for --serve (0: any free port)")
    parser.add_argument("--boot", type=int, default=DEFAULT_BOOTSTRAP, help="bootstrap replicates B")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap generator")
    parser.add_argument(
        "--recompute-ratings",
        action="store_true",
        help="replay all stored matches into the ratings table first (adding matches already does)",
    )


@dataclass(frozen=True)
class StoreChoice:
    """Which store to read, and a line saying why when the user did not name it."""

    url: str
    note: str | None = None


class NoStoreError(LookupError):
    """No store to read (the message says where results were looked for)."""


def find_stores(root: Path = STORE_SEARCH_ROOT) -> list[Path]:
    """SQLite stores under ``root`` (the default store included), nearest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.rglob(STORE_FILE_NAME) if p.is_file()]
    return sorted(found, key=lambda p: (len(p.parts), str(p)))


def choose_store(db: str | None) -> StoreChoice:
    """The store ``envsuite leaderboard`` reads: ``--db``, else the default, else the one under runs/."""
    if db is not None:
        return StoreChoice(db)
    url = default_url()
    parsed = parse_url(url)
    if parsed.backend is Backend.POSTGRES or parsed.target == ":memory:" or Path(parsed.target).exists():
        return StoreChoice(url)
    if os.environ.get(DEFAULT_DB_ENV):
        raise NoStoreError(f"no leaderboard store at {url} (from ${DEFAULT_DB_ENV})")
    stores = find_stores()
    if len(stores) == 1:
        return StoreChoice(str(stores[0]), f"no store at {url}; reading {stores[0]}, the one under runs/")
    if stores:
        listed = "\n".join(f"  envsuite leaderboard --db {p}" for p in stores)
        raise NoStoreError(f"no store at {url}; {len(stores)} stores under runs/, pick one:\n{listed}")
    raise NoStoreError(
        f"no leaderboard store at {url}: `envsuite bench --model M` writes results there "
        f"(`make demo` writes runs/demo/{STORE_FILE_NAME}); or pass --db PATH|URL"
    )


def run(args: argparse.Namespace, console: Console | None = None) -> int:
    """Render the leaderboard for parsed ``args``; returns a process exit code."""
    out = console or Console()
    if args.serve and not args.html:
        print("envsuite leaderboard: error: --serve needs --html DIR (the folder to serve)", file=sys.stderr)
        return 2
    try:
        choice = choose_store(args.db)
        with ResultStore(choice.url, create=False) as store:
            if args.recompute_ratings:
                recompute_ratings(store)
            env_ids = [key.versioned_env_id for key in store.keys(args.env)]
            board = build_leaderboard(
                store,
                env_ids=args.env,
                n_boot=args.boot,
                seed=args.seed,
                catalog_ranges=catalog_reward_ranges(env_ids),
                baseline=args.baseline,
            )
    except (NoStoreError, StoreNotFoundError) as exc:
        for line in str(exc).splitlines():
            print(f"envsuite leaderboard: {display_text(line)}", file=sys.stderr)
        return 1
    except (StoreURLError, MissingDriverError, SchemaTooNewError, ValueError) as exc:
        print(f"envsuite leaderboard: error: {display_text(exc)}", file=sys.stderr)
        return 2
    if args.json:
        print(board_json(board, store=choice.url))
    else:
        if choice.note:
            out.print(display_text(choice.note), markup=False, highlight=False)
        _print_tables(out, board, choice.url, args.env)
    if args.html:
        report = write_html(args.html, board)
        print(f"wrote {report.index}", file=sys.stderr if args.json else sys.stdout)
        if args.serve:
            return _serve(Path(args.html), args.port)
    return 0


def _serve(directory: Path, port: int) -> int:
    server = start_server(directory, port)
    print(f"serving {directory} at http://127.0.0.1:{server.server_address[1]}/index.html (Ctrl-C stops)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
    return 0


def _print_tables(out: Console, board: Leaderboard, url: str, env: Sequence[str] | None) -> None:
    if not board.entries and not board.ratings:
        where = display_text(url) + (f" for {display_text(', '.join(env))}" if env else "")
        out.print(f"no results in {where}", markup=False, highlight=False)
        return
    out.print(render_terminal(board))
    if board.overall:
        out.print(render_overall(board))
    if board.ratings:
        out.print(render_ratings(board))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="envsuite leaderboard", description="Rank stored evaluation results."
    )
    add_arguments(parser)
    return parser


def cli_main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point: ``python -m leaderboard [--db PATH] [--env ID...] [--html DIR]``."""
    return run(build_parser().parse_args(argv))
