"""``envsuite list``: the catalog as a table (or JSON), unavailable and deprecated envs with the reason."""

from __future__ import annotations

import argparse
import json

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envsuite.cli._args import Subparsers
from envsuite.display import printable
from envsuite.registration import EnvSpec, registry


def add_parser(sub: Subparsers) -> None:
    """Add ``envsuite list`` to the command's sub-parsers."""
    p = sub.add_parser("list", help="list the catalog (unavailable envs are shown with the reason)")
    p.add_argument("--namespace", help="only envs in this namespace (e.g. textarena)")
    p.add_argument("--available", action="store_true", help="hide unavailable and deprecated envs")
    p.add_argument("--json", action="store_true", help="print the catalog as JSON (for scripts)")


def status(env_spec: EnvSpec) -> str:
    """An env's status as rich markup (its deprecation or unavailability reason escaped)."""
    if env_spec.deprecated:
        return f"[yellow]deprecated[/]: {escape(printable(env_spec.deprecated))}"
    if env_spec.unavailable:
        return f"[red]unavailable[/]: {escape(printable(env_spec.unavailable))}"
    return "[green]available[/]"


def _listed(args: argparse.Namespace) -> list[EnvSpec]:
    return [
        env_spec
        for env_spec in registry.all_specs()
        if (not args.namespace or env_spec.namespace == args.namespace)
        and not (args.available and (env_spec.unavailable or env_spec.deprecated))
    ]


def _as_json(env_spec: EnvSpec) -> dict[str, object]:
    status = "deprecated" if env_spec.deprecated else "unavailable" if env_spec.unavailable else "available"
    return {
        "id": env_spec.id,
        "namespace": env_spec.namespace,
        "kind": env_spec.kind.value,
        "status": status,
        "reason": env_spec.deprecated or env_spec.unavailable or None,
        "description": env_spec.description,
        "reward_range": list(env_spec.reward_range),
        "max_turns": env_spec.max_turns,
        "tags": list(env_spec.tags),
        "package": env_spec.package,
    }


def run(args: argparse.Namespace) -> int:
    """The catalog as a table whose ids never wrap or get cut (or ``--json``, one object per env)."""
    specs = _listed(args)
    if args.json:
        print(json.dumps([_as_json(s) for s in specs], indent=1))
        return 0
    console = Console()
    # Borderless, so the only fixed widths are the id and kind columns; the description folds.
    table = Table(title="envsuite catalog", box=box.SIMPLE_HEAD, pad_edge=False, expand=False)
    id_width = max((len(s.id) for s in specs), default=2)
    table.add_column("id", no_wrap=True, min_width=id_width, overflow="ignore")
    table.add_column("kind", no_wrap=True)
    table.add_column("about", overflow="fold", ratio=1)
    for env_spec in specs:
        about = escape(printable(env_spec.description))
        if env_spec.deprecated or env_spec.unavailable:
            about = f"{status(env_spec)}. {about}"
        table.add_row(escape(printable(env_spec.id)), env_spec.kind.value, about)
    console.print(table)
    console.print(
        f"{len(specs)} env(s). Make one with envsuite.make_env(ID); check it with `envsuite check ID`."
    )
    for message in registry.plugin_errors.values():
        console.print(f"[red]plugin error[/]: {escape(printable(message))}")
    return 0
