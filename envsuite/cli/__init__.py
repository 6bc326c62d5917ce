"""The ``envsuite`` command line (the top layer): one module per command, ``_<name>_cmd.py``."""

from envsuite.cli._main import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]
