"""``envsuite list`` and ``envsuite show``."""

from __future__ import annotations

import argparse
import inspect
import json

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envsuite.display import printable
from envsuite.registration import EnvSpec, registry, spec


def _status(env_spec: EnvSpec) -> str:
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


def run_list(args: argparse.Namespace) -> int:
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
            about = f"{_status(env_spec)}. {about}"
        table.add_row(escape(printable(env_spec.id)), env_spec.kind.value, about)
    console.print(table)
    console.print(
        f"{len(specs)} env(s). Make one with envsuite.make_env(ID); check it with `envsuite check ID`."
    )
    for message in registry.plugin_errors.values():
        console.print(f"[red]plugin error[/]: {escape(printable(message))}")
    return 0


def _kwargs_table(env_spec: EnvSpec) -> Table:
    table = Table(title="keyword arguments")
    table.add_column("name")
    table.add_column("default")
    params = list(inspect.signature(env_spec.load()).parameters.values())[1:]
    for param in params:
        if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        default = env_spec.kwargs.get(param.name, param.default)
        shown = "(required)" if default is inspect.Parameter.empty else printable(repr(default))
        table.add_row(escape(param.name), escape(shown))
    return table


def run_show(args: argparse.Namespace) -> int:
    import asyncio

    from envsuite import make_env
    from envsuite.core import as_overflow

    env_spec = spec(args.env_id)
    console = Console()
    console.print(
        f"[bold]{escape(printable(env_spec.id))}[/] ({env_spec.kind.value}) from "
        f"{escape(printable(env_spec.package))}"
    )
    console.print(printable(env_spec.description), markup=False, highlight=False)
    entry = escape(printable(str(env_spec.entry_point)))
    console.print(f"entry point: {entry}   reward range: {env_spec.reward_range}")
    console.print(f"max turns: {env_spec.max_turns or 1}   status: {_status(env_spec)}")
    if env_spec.unavailable:
        return 0
    console.print(_kwargs_table(env_spec))
    env = make_env(env_spec.id, seed=args.seed)
    start = asyncio.run(env.initial_observation())
    overflow = as_overflow(start)
    if overflow is not None:
        console.print(f"seed {args.seed}: prompt overflows ({overflow.prompt_tokens or '?'} tokens)")
        return 0
    ob, stop = start  # type: ignore[misc]  # not an overflow, so the (observation, stop) pair
    console.rule(escape(printable(f"prompt for seed {args.seed} ({ob.length} tokens, stop={stop})")))
    from envsuite import RendererConfig

    text = str(RendererConfig().build().tokenizer.decode(ob.to_ints()))
    console.print(printable(text), markup=False, highlight=False)
    return 0
