"""``envsuite list``: the catalog as a table (or JSON), unavailable and deprecated envs with the reason.

Patterns narrow it as ``bench`` and ``train`` read them (ids, ``family:NAME``, ``tag:NAME``, globs,
``!`` to leave out: ``envsuite.catalog._select``); ``--family`` and ``--tag`` are the same as those patterns.
"""

from __future__ import annotations

import argparse
import json

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envsuite import select_envs
from envsuite.catalog.registration import EnvSpec, env_family, family_order, registry
from envsuite.cli._args import Subparsers
from envsuite.display import printable


def add_parser(sub: Subparsers) -> None:
    """Add ``envsuite list`` to the command's sub-parsers."""
    p = sub.add_parser("list", help="list the catalog (unavailable envs are shown with the reason)")
    p.add_argument(
        "patterns",
        nargs="*",
        metavar="PATTERN",
        help="ids, family:NAME, tag:NAME or globs (textarena/*); !PATTERN leaves out (default: all)",
    )
    p.add_argument("--family", action="append", default=[], help="only this family (repeatable)")
    p.add_argument("--tag", action="append", default=[], help="only envs with this tag (repeatable)")
    p.add_argument("--families", action="store_true", help="list the families and tags, with counts")
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
    specs = registry.all_specs()
    if args.patterns:
        chosen = {s.id for s in select_envs(args.patterns, include_unavailable=True)}
        specs = [s for s in specs if s.id in chosen]
    for prefix, names in (("family:", args.family), ("tag:", args.tag)):
        if names:  # each flag narrows what the patterns chose
            chosen = {s.id for s in select_envs([prefix + n for n in names], include_unavailable=True)}
            specs = [s for s in specs if s.id in chosen]
    return [
        env_spec
        for env_spec in specs
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
        "family": env_family(env_spec),
        "tags": sorted(env_spec.all_tags),
        "rungs": [{"label": rung.label, "kwargs": dict(rung.kwargs)} for rung in env_spec.rungs],
        "package": env_spec.package,
    }


def _print_families(console: Console, specs: list[EnvSpec]) -> None:
    """Each family and tag with how many of ``specs`` have it (available ones / all)."""
    table = Table(title="families and tags", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("selector", "available", "listed"):
        table.add_column(column, no_wrap=True)
    families = family_order(env_family(s) for s in specs)
    tags = sorted({t for s in specs for t in s.all_tags})
    rows = [("family:" + f, [s for s in specs if env_family(s) == f]) for f in families]
    rows += [("tag:" + t, [s for s in specs if t in s.all_tags]) for t in tags]
    for selector, members in rows:
        ready = sum(not (s.unavailable or s.deprecated) for s in members)
        table.add_row(escape(printable(selector)), str(ready), str(len(members)))
    console.print(table)


def run(args: argparse.Namespace) -> int:
    """The catalog as a table whose ids never wrap or get cut (or ``--json``, one object per env)."""
    specs = _listed(args)
    if args.families:
        _print_families(Console(), specs)
        return 0
    if args.json:
        print(json.dumps([_as_json(s) for s in specs], indent=1))
        return 0
    console = Console()
    # Borderless, so the only fixed widths are the id and kind columns; the description folds.
    table = Table(title="envsuite catalog", box=box.SIMPLE_HEAD, pad_edge=False, expand=False)
    id_width = max((len(s.id) for s in specs), default=2)
    table.add_column("id", no_wrap=True, min_width=id_width, overflow="ignore")
    table.add_column("family", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("about", overflow="fold", ratio=1)
    for env_spec in specs:
        about = escape(printable(env_spec.description))
        if env_spec.deprecated or env_spec.unavailable:
            about = f"{status(env_spec)}. {about}"
        family = escape(printable(env_family(env_spec)))
        table.add_row(escape(printable(env_spec.id)), family, env_spec.kind.value, about)
    console.print(table)
    console.print(
        f"{len(specs)} env(s), {sum(not (s.unavailable or s.deprecated) for s in specs)} available. Make one "
        "with envsuite.make_env(ID); check it with `envsuite check ID`; `--families` lists the selectors."
    )
    for message in registry.plugin_errors.values():
        console.print(f"[red]plugin error[/]: {escape(printable(message))}")
    return 0
