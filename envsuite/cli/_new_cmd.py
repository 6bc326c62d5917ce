"""``envsuite new NAME``: scaffold an env package that installs, lists, checks, benches and trains."""

from __future__ import annotations

import argparse

from envsuite.catalog.registration import EnvKind
from envsuite.cli._args import Subparsers


def add_parser(sub: Subparsers) -> None:
    """Register ``envsuite new`` on the top-level parser's subcommands."""
    p = sub.add_parser(
        "new",
        help="create a ready-to-edit env package (env, builders, entry point, README, tests)",
        description=__doc__,
    )
    p.add_argument("name", metavar="NAME", help="package and env name, e.g. word_reverse (env id NAME-v0)")
    p.add_argument(
        "--kind",
        choices=[k.value for k in EnvKind],
        default=EnvKind.SINGLE_TURN.value,
        help="single-turn: word reversal; multi-turn: number guessing; game: two-player Nim",
    )
    p.add_argument("--dir", default=".", help="where to create the package directory")


def run(args: argparse.Namespace) -> int:
    """Exit codes: 0 created, 2 bad name or the directory exists (nothing written)."""
    from envsuite.scaffold import create_env_package

    result = create_env_package(args.name, args.dir, kind=args.kind)  # a ScaffoldError is a UsageError
    print(f"created {result.distribution} ({result.kind.value}) in {result.root}:")
    for path in result.files:
        print(f"  {path.relative_to(result.root)}")
    base_id = result.env_id.rsplit("-v", 1)[0]
    print(
        "next steps:\n"
        f"  pip install -e {result.root}      # registers {result.env_id} via the envsuite.envs entry point\n"
        f"  envsuite check {base_id}          # the conformance gate\n"
        f"  python -m pytest {result.root}\n"
        f"  edit {result.package_dir / 'env.py'} (bump -vN when behaviour changes)"
    )
    return 0
