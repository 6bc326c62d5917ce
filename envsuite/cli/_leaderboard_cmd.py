"""``envsuite leaderboard``: print the tables (or JSON) and optionally write (and serve) the static page.

Reading never creates a store. Without ``--db`` the default store is read when it exists; otherwise the
stores under ``runs/`` are looked for (:func:`envsuite.leaderboard.choose_store`): one is read and named,
several are listed. No store is exit 1; a bad URL or setting is exit 2.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from envsuite import catalog_reward_ranges
from envsuite.cli._args import Subparsers
from envsuite.errors import UsageError
from envsuite.leaderboard import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_DB_ENV,
    STORE_FILE_NAME,
    STORE_SEARCH_ROOT,
    Leaderboard,
    NoStoreError,
    ResultStore,
    StoreNotFoundError,
    board_json,
    build_leaderboard,
    choose_store,
    default_url,
    display_text,
    recompute_ratings,
    render_overall,
    render_ratings,
    render_terminal,
    start_server,
    write_html,
)


def add_parser(sub: Subparsers) -> None:
    """Add ``envsuite leaderboard`` to the command's sub-parsers."""
    p = sub.add_parser("leaderboard", help="show the leaderboard (terminal table, or --html DIR for a page)")
    p.add_argument(
        "--db",
        default=None,
        help=f"store path or URL (sqlite:///PATH, postgresql://...); default: ${DEFAULT_DB_ENV}, else "
        f"{default_url()}, else the one store under {STORE_SEARCH_ROOT}/ (make demo writes "
        f"runs/demo/{STORE_FILE_NAME})",
    )
    p.add_argument(
        "--env",
        action="extend",
        nargs="+",
        default=None,
        metavar="ID",
        help="only these envs (repeatable; 'math' means every version, 'math-v0' one)",
    )
    p.add_argument("--html", default=None, metavar="DIR", help="also write the static page into DIR")
    p.add_argument("--json", action="store_true", help="print the leaderboard as JSON (for scripts)")
    p.add_argument(
        "--baseline",
        default=None,
        metavar="MODEL",
        help="model the per-model pages compare with (default: the best other)",
    )
    p.add_argument(
        "--serve",
        action="store_true",
        help="after writing --html DIR, serve it on 127.0.0.1 (Inspect's bundled viewer needs http) until Ctrl-C",
    )
    p.add_argument("--port", type=int, default=8765, help="port for --serve (0: any free port)")
    p.add_argument("--boot", type=int, default=DEFAULT_BOOTSTRAP, help="bootstrap replicates B")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap generator")
    p.add_argument(
        "--recompute-ratings",
        action="store_true",
        help="replay all stored matches into the ratings table first (adding matches already does)",
    )


def run(args: argparse.Namespace) -> int:
    """Render the leaderboard; exit 1 when there is no store to read (the message says where to look)."""
    if args.serve and not args.html:
        raise UsageError("--serve needs --html DIR (the folder to serve)")
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
    if args.json:
        print(board_json(board, store=choice.url))
    else:
        out = Console()
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
