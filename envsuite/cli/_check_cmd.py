"""``envsuite check``: the conformance checker from the shell."""

from __future__ import annotations

import argparse

from rich.console import Console

from envsuite.display import printable
from envsuite.registration import registry
from envsuite.testing import check_env


def run_check(args: argparse.Namespace) -> int:
    console = Console()
    env_ids = list(args.env_ids)
    if args.all:
        env_ids += [s.id for s in registry.all_specs() if not s.unavailable and not s.deprecated]
    if not env_ids:
        console.print("name env ids to check, or --all")
        return 2
    failed = 0
    for env_id in env_ids:
        report = check_env(env_id, model=args.model, strict=args.strict)
        console.print(printable(report.render()), markup=False, highlight=False)
        failed += not report.passed
    if len(env_ids) > 1:
        console.print(f"{len(env_ids) - failed}/{len(env_ids)} env(s) passed")
    return 1 if failed else 0
