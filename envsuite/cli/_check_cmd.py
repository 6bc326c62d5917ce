"""``envsuite check``: the conformance checker from the shell."""

from __future__ import annotations

import argparse

from rich.console import Console

from envsuite.catalog.registration import registry
from envsuite.cli._args import Subparsers
from envsuite.display import printable
from envsuite.errors import UsageError


def add_parser(sub: Subparsers) -> None:
    """Add ``envsuite check`` to the command's sub-parsers."""
    p = sub.add_parser("check", help="run the conformance checker on envs")
    p.add_argument(
        "env_ids",
        nargs="*",
        metavar="ENV_ID",
        help="ids, family:NAME, tag:NAME or globs (as `envsuite list`)",
    )
    p.add_argument("--all", action="store_true", help="check every available env")
    p.add_argument("--strict", action="store_true", help="treat warnings as failures")
    p.add_argument("--quick", action="store_true", help="fewer episodes per check (one seed; 3 for variety)")
    p.add_argument("--model", default="tiny-random", help="model whose tokenizer renders prompts")


def run(args: argparse.Namespace) -> int:
    """Check each env; exit 1 when any fails (2: an unknown id, or none named)."""
    from envsuite import is_env_pattern, select_envs
    from envsuite.testing import ProbeTally, check_env, summarize_probes

    console = Console()
    env_ids: list[str] = []
    for text in args.env_ids:
        if is_env_pattern(text):
            env_ids += [s.id for s in select_envs([text])]
        else:
            # An unknown id is the user's mistake (one line, exit 2, close ids suggested, as `make`),
            # found before any env is checked; a deprecated one goes on for the checker to report.
            registry.spec(text, deprecated_ok=True)
            env_ids.append(text)
    if args.all:
        env_ids += [s.id for s in registry.all_specs() if not s.unavailable and not s.deprecated]
    if not env_ids:
        raise UsageError("name env ids to check, or --all")
    failed = 0
    tallies: list[ProbeTally] = []
    for env_id in env_ids:
        report = check_env(env_id, model=args.model, strict=args.strict, quick=args.quick)
        console.print(printable(report.render()), markup=False, highlight=False)
        failed += not report.passed
        tallies += [report.probe_tally] if report.probe_tally is not None else []
    if len(env_ids) > 1:
        console.print(f"{len(env_ids) - failed}/{len(env_ids)} env(s) passed")
        console.print(summarize_probes(tallies), markup=False, highlight=False)
    return 1 if failed else 0
