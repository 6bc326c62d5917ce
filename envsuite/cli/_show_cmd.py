"""``envsuite show ID``: one env's spec, its keyword arguments with defaults, its difficulty rungs, and
a sample prompt."""

from __future__ import annotations

import argparse
import inspect

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envsuite.catalog.registration import RUNG_KWARG, EnvSpec, env_family, spec
from envsuite.cli._args import Subparsers
from envsuite.cli._list_cmd import status
from envsuite.display import printable


def add_parser(sub: Subparsers) -> None:
    """Add ``envsuite show`` to the command's sub-parsers."""
    p = sub.add_parser("show", help="show one env's spec, keyword arguments and a sample prompt")
    p.add_argument("env_id")
    p.add_argument("--seed", type=int, default=0)


def _kwargs_table(env_spec: EnvSpec) -> Table:
    table = Table(title="keyword arguments")
    table.add_column("name")
    table.add_column("default")
    params = list(inspect.signature(env_spec.load()).parameters.values())[1:]
    named = set()
    for param in params:
        if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        named.add(param.name)
        default = env_spec.kwargs.get(param.name, param.default)
        shown = "(required)" if default is inspect.Parameter.empty else printable(repr(default))
        table.add_row(escape(param.name), escape(shown))
    # An env taking **kwargs (reasoning-gym's difficulty parameters) lists them as its spec's defaults.
    for name, default in env_spec.kwargs.items():
        if name not in named:
            table.add_row(escape(name), escape(printable(repr(default))))
    if env_spec.rungs:
        table.add_row(RUNG_KWARG, f"None (0..{len(env_spec.rungs) - 1}: the rungs below)")
    return table


def _rungs_table(env_spec: EnvSpec) -> Table:
    table = Table(title=f"difficulty rungs ({RUNG_KWARG}=N sets these keyword arguments)")
    table.add_column(RUNG_KWARG)
    table.add_column("what it asks")
    table.add_column("keyword arguments")
    for index, rung in enumerate(env_spec.rungs):
        kwargs = ", ".join(f"{k}={v!r}" for k, v in rung.kwargs.items())
        table.add_row(str(index), escape(printable(rung.label)), escape(printable(kwargs)))
    return table


def run(args: argparse.Namespace) -> int:
    """Print the spec, the keyword arguments and the prompt of seed ``--seed``."""
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
    console.print(f"max turns: {env_spec.max_turns or 1}   status: {status(env_spec)}")
    tags = ", ".join(sorted(env_spec.all_tags))
    console.print(escape(printable(f"family: {env_family(env_spec)}   tags: {tags}")))
    if env_spec.unavailable:
        return 0
    console.print(_kwargs_table(env_spec))
    if env_spec.rungs:
        console.print(_rungs_table(env_spec))
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
