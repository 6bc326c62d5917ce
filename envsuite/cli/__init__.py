"""The ``envsuite`` command line: list, show, check, play and demo (each in its own module)."""

from envsuite.cli._main import build_parser, main

__all__ = ["build_parser", "main"]
