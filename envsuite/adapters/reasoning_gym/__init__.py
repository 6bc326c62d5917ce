"""Every reasoning-gym dataset as a catalog env, ``reasoning_gym/<name>-vN`` (optional extra).

``pip install 'envsuite[reasoning-gym]'`` makes :func:`register_reasoning_gym` (an ``envsuite.envs``
entry point) add each of reasoning-gym's datasets to the catalog, with its config's fields as keyword
arguments (their defaults as the spec's) and, where the dataset defines a curriculum, its levels as the
spec's difficulty rungs (``rung=i``). Registration is plain data (``datasets.json``, see ``_table``):
reasoning-gym is imported only when an env is made. A dataset that cannot run here is listed as
unavailable with the reason. ``composite`` mixes datasets: ``datasets={"chain_sum": 2, "gcd": 1}``.

Versions: ``-v0`` for every dataset, except the eight registered before the rest
(:data:`RESCORED_DATASETS`), whose ``-v0`` scored replies differently (a reply without an answer block
was read from its last line, and partial credit counted as wrong): their current version is ``-v1`` and
``-v0`` is listed as deprecated, so the leaderboard never mixes the two.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import Any

from envsuite.adapters.reasoning_gym._table import DatasetInfo, Table, installed_version, load_table
from envsuite.catalog import registration
from envsuite.catalog.registration import EnvFamily, EnvKind, register

NAMESPACE = "reasoning_gym"
ENTRY_POINT = "envsuite.adapters.reasoning_gym._env:ReasoningGymEnv"
RESCORED_DATASETS: tuple[str, ...] = (
    "basic_arithmetic",
    "chain_sum",
    "leg_counting",
    "spell_backward",
    "word_sorting",
    "letter_counting",
    "gcd",
    "caesar_cipher",
)
"""The datasets registered before every dataset was (as ``-v0``, now deprecated): now ``-v1``."""
DEFAULT_DATASETS = RESCORED_DATASETS
"""Fast datasets with exact scorers (the sample docs and tests use); every dataset is registered."""
COMPOSITE_DEFAULT_MIX: dict[str, float] = dict.fromkeys(RESCORED_DATASETS, 1.0)
"""``reasoning_gym/composite``'s mix unless ``datasets=`` says another: those eight, equally."""
REWARD_RANGE = (-1.0, 1.0)
TIED_DATASETS: dict[str, str] = {
    "game_of_life_halting": (
        "reasoning-gym's scorer rewards every answer: score_answer('zzz', entry) == 1.0, as much as the "
        "reference answer (reasoning-gym 0.1.25)"
    ),
    "coin_flip": (
        "reasoning-gym's scorer gives the answer '0' full marks for every probability below 1 (its "
        "prefix partial credit divides by the shorter text: '0' against '0.3125' matches 1 of 1), as much "
        "as the reference answer (reasoning-gym 0.1.25)"
    ),
}
"""Datasets whose junk answer earns what the reference earns (the tie rule of the reward-hacking suite):
listed unavailable with the reason. Measured over every dataset, 5 seeds, 9 junk answers, by
``python -m envsuite.adapters.reasoning_gym._ties`` (rerun it after upgrading reasoning-gym)."""


def available() -> bool:
    """Whether reasoning-gym can be imported here (checked without importing it)."""
    return importlib.util.find_spec("reasoning_gym") is not None


def env_id(name: str) -> str:
    """The current catalog id of dataset ``name``."""
    return f"{NAMESPACE}/{name}-v{1 if name in RESCORED_DATASETS else 0}"


def register_reasoning_gym(names: Iterable[str] | None = None) -> list[str]:
    """Register ``reasoning_gym/<name>`` for each dataset (default: all of them); returns the ids added.

    Idempotent. A name reasoning-gym does not have is registered as unavailable, saying so.
    """
    if not available():
        return []
    table = load_table()
    added: list[str] = []
    for name in table.names() if names is None else names:
        info = table.get(name) or _missing(name, table)
        if name in RESCORED_DATASETS:
            _register_retired(name)
        if env_id(name) not in registration.registry:
            register(env_id(name), entry_point=ENTRY_POINT, kwargs=_kwargs(info), **_spec_fields(info))
            added.append(env_id(name))
    return added


def _kwargs(info: DatasetInfo) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"dataset": info.name, **info.kwargs}
    if info.name == "composite":
        kwargs["datasets"] = dict(COMPOSITE_DEFAULT_MIX)
    return kwargs


def _spec_fields(info: DatasetInfo) -> dict[str, Any]:
    levels = f"; {len(info.rungs)} difficulty rungs (rung=0..{len(info.rungs) - 1})" if info.rungs else ""
    return {
        "kind": EnvKind.SINGLE_TURN,
        "description": f"reasoning-gym {info.name} ({info.category}): {info.description}{levels}.",
        "reward_range": REWARD_RANGE,
        "tags": ("reasoning-gym", info.category),
        "family": EnvFamily.REASONING.value,
        "rungs": info.rungs,
        "unavailable": info.unavailable or TIED_DATASETS.get(info.name),
    }


def _register_retired(name: str) -> None:
    retired = f"{NAMESPACE}/{name}-v0"
    if retired in registration.registry:
        return
    register(
        retired,
        entry_point=ENTRY_POINT,
        kwargs={"dataset": name},
        description=f"reasoning-gym {name}, first scoring.",
        reward_range=REWARD_RANGE,
        tags=("reasoning-gym",),
        family=EnvFamily.REASONING.value,
        deprecated=(
            f"use {env_id(name)}: it reads and scores replies as reasoning-gym's own pipeline does "
            "(an <answer> block, partial credit kept)"
        ),
    )


def _missing(name: str, table: Table) -> DatasetInfo:
    return DatasetInfo(
        name=name,
        category="other",
        description=f"reasoning-gym {name}",
        kwargs={},
        accepted=(),
        unavailable=f"reasoning-gym {table.version} has no dataset named {name!r}",
    )


__all__ = [
    "COMPOSITE_DEFAULT_MIX",
    "DEFAULT_DATASETS",
    "NAMESPACE",
    "RESCORED_DATASETS",
    "DatasetInfo",
    "TIED_DATASETS",
    "Table",
    "available",
    "env_id",
    "installed_version",
    "load_table",
    "register_reasoning_gym",
]
