"""``envsuite list`` and ``envsuite show``."""

from __future__ import annotations

import argparse
import inspect

from rich.console import Console
from rich.table import Table

from envsuite.registration import EnvSpec, registry, spec


def _status(env_spec: EnvSpec) -> str:
    if env_spec.deprecated:
        return f"[yellow]deprecated[/]: {env_spec.deprecated}"
    if env_spec.unavailable:
        return f"[red]unavailable[/]: {env_spec.unavailable}"
    return "[green]available[/]"


def run_list(args: argparse.Namespace) -> int:
    table = Table(title="envsuite catalog", show_lines=False)
    for column in ("id", "kind", "status", "description"):
        table.add_column(column, overflow="fold")
    shown = 0
    for env_spec in registry.all_specs():
        if args.namespace and env_spec.namespace != args.namespace:
            continue
        if args.available and (env_spec.unavailable or env_spec.deprecated):
            continue
        table.add_row(env_spec.id, env_spec.kind.value, _status(env_spec), env_spec.description)
        shown += 1
    console = Console()
    console.print(table)
    console.print(f"{shown} env(s). Make one with envsuite.make_env(ID); check it with `envsuite check ID`.")
    for message in registry.plugin_errors.values():
        console.print(f"[red]plugin error[/]: {message}")
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
        table.add_row(param.name, "(required)" if default is inspect.Parameter.empty else repr(default))
    return table


def run_show(args: argparse.Namespace) -> int:
    import asyncio

    from envsuite import make_env
    from envsuite.core import InitialObservationOverflow

    env_spec = spec(args.env_id)
    console = Console()
    console.print(f"[bold]{env_spec.id}[/] ({env_spec.kind.value}) from {env_spec.package}")
    console.print(env_spec.description)
    console.print(f"entry point: {env_spec.entry_point}   reward range: {env_spec.reward_range}")
    console.print(f"max turns: {env_spec.max_turns or 1}   status: {_status(env_spec)}")
    if env_spec.unavailable:
        return 0
    console.print(_kwargs_table(env_spec))
    env = make_env(env_spec.id, seed=args.seed)
    start = asyncio.run(env.initial_observation())
    if isinstance(start, InitialObservationOverflow):
        console.print(f"seed {args.seed}: prompt overflows ({start.prompt_tokens} tokens)")
        return 0
    ob, stop = start
    console.rule(f"prompt for seed {args.seed} ({ob.length} tokens, stop={stop})")
    from envsuite import RendererConfig

    console.print(RendererConfig().build().tokenizer.decode(ob.to_ints()), markup=False, highlight=False)
    return 0
