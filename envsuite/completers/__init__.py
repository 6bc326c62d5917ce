"""Completers: policies over tokens (for RL) and over messages (for partners, judges and evals)."""

from __future__ import annotations

from envsuite.completers._sampling import SamplingClientLike, SamplingMessageCompleter, SamplingTokenCompleter
from envsuite.completers._scripted import (
    RandomTokenCompleter,
    ScriptedMessageCompleter,
    ScriptedTokenCompleter,
    ScriptExhaustedError,
)

__all__ = [
    # model-backed
    "SamplingClientLike",
    "SamplingMessageCompleter",
    "SamplingTokenCompleter",
    # model-free
    "RandomTokenCompleter",
    "ScriptExhaustedError",
    "ScriptedMessageCompleter",
    "ScriptedTokenCompleter",
]
