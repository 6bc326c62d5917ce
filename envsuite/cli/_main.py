"""The ``envsuite`` command: its table of commands, the parser built from it, and how errors are shown.

Each command lives in a module of its own (``envsuite/cli/_<name>_cmd.py``) with two functions:
``add_parser(sub)`` adds its sub-parser, ``run(args) -> int`` does the work and returns the exit code.
:data:`COMMANDS` names them; adding a command is one line there. A command's module is imported only when
that command runs (or when the top-level help lists them all), so `envsuite list` never loads torch.

Errors: a :class:`~envsuite.errors.UsageError` (an unknown id, a bad setting: something the user can fix)
is one line and exit 2; anything else is a fault and shows its traceback, exit 1. ``--debug`` shows the
traceback of every error.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, Protocol, cast

from envsuite.cli._args import Subparsers
from envsuite.display import printable
from envsuite.errors import UsageError

DESCRIPTION = """\
A catalog of token-level environments for RL on language models (math,
twenty questions, games), with a GRPO trainer, Inspect AI benchmarks and a
leaderboard. Everything runs offline on the embedded SmolLM2-135M model.

first steps:
  envsuite list               what is in the catalog
  envsuite play tictactoe     watch one episode (--policy human: play it)
  envsuite demo               train, benchmark base vs trained, rank them

`envsuite COMMAND --help` describes each command."""

COMMANDS: dict[str, str] = {
    "list": "envsuite.cli._list_cmd",
    "show": "envsuite.cli._show_cmd",
    "check": "envsuite.cli._check_cmd",
    "play": "envsuite.cli._play_cmd",
    "demo": "envsuite.cli._demo_cmd",
    "train": "envsuite.cli._train_cmd",
    "match": "envsuite.cli._match_cmd",
    "results": "envsuite.cli._results_cmd",
    "bench": "envsuite.cli._bench_cmd",
    "leaderboard": "envsuite.cli._leaderboard_cmd",
    "new": "envsuite.cli._new_cmd",
    "serve-env": "envsuite.cli._serve_env_cmd",
    "serve": "envsuite.cli._serve_cmd",
    "serve-sandbox": "envsuite.cli._serve_sandbox_cmd",
    "doctor": "envsuite.cli._doctor_cmd",
    "judge-check": "envsuite.cli._judge_check_cmd",
}
"""Command name -> the module holding its ``add_parser`` and ``run``, in the order help lists them."""

DEBUG_HELP = "show the full traceback of any error"


class Command(Protocol):
    """What a command module provides."""

    def add_parser(self, sub: Subparsers) -> None:
        """Add the command's sub-parser (its name, help and flags) to ``sub``."""

    def run(self, args: argparse.Namespace) -> int:
        """Do the command for the parsed ``args``; returns the process exit code."""


def command(name: str) -> Command:
    """The module of command ``name`` (imported now)."""
    return cast(Command, importlib.import_module(COMMANDS[name]))


class OneLineErrorParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line and exit 2, as every other user mistake.

    argparse's own ``error`` prints the whole usage block first (39 lines for ``envsuite train``) and the
    line that matters last. Every parser of the command is this class (``add_subparsers`` makes its
    sub-parsers of the parent's class), so an unknown choice of any enum-valued flag (``--loss``,
    ``--runner``, ``--kind``...), a value of the wrong type or a missing argument all read the same.
    """

    def error(self, message: str) -> NoReturn:
        line = printable(f"{self.prog}: error: {message}; see `{self.prog} --help`")
        self.exit(2, line + "\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``envsuite`` parser. With ``only`` (a command name) the other commands are listed without their
    flags, so parsing one command imports nothing another one needs."""
    # Typed as the base class, which the commands' add_parser takes; its sub-parsers are still this class.
    parser: argparse.ArgumentParser = OneLineErrorParser(
        prog="envsuite", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        if only is None or name == only:
            command(name).add_parser(sub)
        else:
            sub.add_parser(name)
    for command_parser in sub.choices.values():  # `envsuite bench ... --debug` works too
        command_parser.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP
        )
    return parser


def _command_in(arguments: Sequence[str]) -> str | None:
    """The command ``arguments`` name (their first word that is not an option), if it is one."""
    first = next((a for a in arguments if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def started_as_the_command() -> bool:
    """Whether this process is the ``envsuite`` command (the console script or ``python -m envsuite``),
    not a program that calls :func:`main`."""
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return Path(sys.argv[0]).name == "envsuite" or getattr(main_spec, "name", None) == "envsuite.__main__"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``envsuite`` command on ``argv`` (default: this process's arguments); returns the exit code."""
    if argv is None and started_as_the_command():
        # The envsuite command runs under jemalloc where it is installed: training steps ~25% faster
        # at the same peak memory (envsuite.engine._memory). Only the command itself, never a caller.
        from envsuite.engine import reexec_under_jemalloc

        reexec_under_jemalloc(sys.orig_argv[1:])
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(_command_in(arguments)).parse_args(arguments)
    try:
        return command(args.command).run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except UsageError as exc:
        if args.debug:
            traceback.print_exc()
        print(printable(f"envsuite {args.command}: error: {exc}"), file=sys.stderr)
        return 2
    except Exception as exc:
        traceback.print_exc()
        print(
            printable(f"envsuite {args.command}: unexpected {type(exc).__name__}: {exc}\n")
            + "This is not a mistake in the command. Unless the traceback above names a problem of this "
            "machine (a file, a port, memory), it is a bug in envsuite: please report it with the traceback.",
            file=sys.stderr,
        )
        return 1
